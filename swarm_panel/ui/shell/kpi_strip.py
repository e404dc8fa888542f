"""The KPI strip above the docks: the story in big numbers."""

from __future__ import annotations

import math

from PySide6 import QtWidgets

from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.ui.toolkit import theme


class KpiStrip(QtWidgets.QWidget):
    """The story in five numbers, big: useful vs padding tok/s, utilization, occupancy, queue."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        self.labels: dict[str, QtWidgets.QLabel] = {}
        tips = {"device_busy": "Share of the engine thread's last second the device spent computing (llama_decode "
                               "until its outputs are ready); the rest went to sampling, host work, waiting for "
                               "the GIL and idle time (docs/gpu.md)"}
        for key, title, colour in (("tok_s", "useful tok/s", theme.USEFUL), ("padding_tok_s", "padding tok/s", theme.PADDING),
                                   ("utilization", "utilization", theme.MINT),
                                   ("device_busy", "device busy", theme.MINT), ("ceiling", "ceiling tok/s", theme.MINT),
                                   ("occupancy", "occupancy", theme.USEFUL), ("queue", "waiting", theme.QUEUE)):
            box = QtWidgets.QVBoxLayout()
            box.setSpacing(0)
            value = QtWidgets.QLabel("–")
            value.setStyleSheet(f"color: {colour}; font-size: 17pt; font-weight: bold")
            caption = QtWidgets.QLabel(title)
            caption.setToolTip(tips.get(key, ""))
            caption.setStyleSheet(f"color: {theme.TEXT_DIM}; font-size: 9pt")
            box.addWidget(value)
            box.addWidget(caption)
            layout.addLayout(box)
            layout.addStretch(1)
            self.labels[key] = value

    def update_from(self, feed: StepFeed) -> None:
        self.show({key: feed.latest(key) for key in self.labels})

    def show(self, values: dict[str, float], missing_tip: str = "") -> None:
        """A key left out of `values` shows "–", with `missing_tip` saying why."""
        for key, label in self.labels.items():
            value = values.get(key, math.nan)
            label.setToolTip("" if key in values else missing_tip)
            if math.isnan(value):
                label.setText("–")
            elif key in ("utilization", "occupancy", "device_busy"):
                label.setText(f"{value:.0f}%")
            else:
                label.setText(f"{value:.0f}")
