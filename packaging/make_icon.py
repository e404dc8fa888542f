"""Draws swarm_panel/ui/desktop/icon.png (256 px): eight lanes on petrol green, gold work with a hatched padding tail
on the top lanes and full rows below: the panel's story in one glyph. Run once; the PNG is committed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6 import QtCore, QtGui

SIZE = 256


def draw(path: Path) -> None:
    _app = QtGui.QGuiApplication.instance() or QtGui.QGuiApplication(sys.argv[:1])
    image = QtGui.QImage(SIZE, SIZE, QtGui.QImage.Format.Format_ARGB32)
    image.fill(QtCore.Qt.GlobalColor.transparent)
    p = QtGui.QPainter(image)
    p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
    p.setBrush(QtGui.QColor("#0c2428"))
    p.setPen(QtGui.QPen(QtGui.QColor("#6fd6b0"), 6))
    p.drawRoundedRect(QtCore.QRectF(6, 6, SIZE - 12, SIZE - 12), 40, 40)
    gold, grey = QtGui.QColor("#f2c14e"), QtGui.QColor("#8a9597")
    hatch = QtGui.QBrush(grey, QtCore.Qt.BrushStyle.BDiagPattern)
    left, right, top, lane_h, gap = 36, SIZE - 36, 40, 18, 4
    useful = (0.25, 0.45, 0.7, 1.0, 1.0, 1.0, 1.0, 1.0)
    for k, share in enumerate(useful):
        y = top + k * (lane_h + gap)
        width = (right - left) * share
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        p.setBrush(gold)
        p.drawRoundedRect(QtCore.QRectF(left, y, width, lane_h), 4, 4)
        if share < 1.0:
            p.setBrush(QtGui.QColor("#1d3b40"))
            p.drawRect(QtCore.QRectF(left + width + 2, y, right - left - width - 2, lane_h))
            p.setBrush(hatch)
            p.drawRect(QtCore.QRectF(left + width + 2, y, right - left - width - 2, lane_h))
    p.end()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path)):
        raise SystemExit(f"could not write {path}")


if __name__ == "__main__":
    beside_its_room = Path(__file__).resolve().parents[1] / "swarm_panel" / "ui" / "desktop" / "icon.png"
    draw(Path(sys.argv[1]) if len(sys.argv) > 1 else beside_its_room)
