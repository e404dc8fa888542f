"""Export the current figures (CSV or JSON) and the plots (PNG)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any

from PySide6 import QtCore

from swarm_panel.app.service.step_feed import TICK_COLUMNS, StepFeed
from swarm_panel.runtime.core.careful_write import unwritable_folders, write_file
from swarm_panel.runtime.core.fit import ceiling_tok_s
from swarm_panel.runtime.serving.metrics import MetricsSnapshot


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def snapshot_dict(snapshot: MetricsSnapshot) -> dict[str, Any]:
    figures = {f.name: getattr(snapshot, f.name) for f in dataclasses.fields(snapshot) if f.name not in ("agents", "step_line")}
    figures["kv_pct"] = snapshot.kv_pct
    line = snapshot.step_line
    figures["step_line"] = None if line is None else {
        "floor_ms": line.floor_ms, "per_row_ms": line.per_row_ms, "points": line.points,
        "ceiling_tok_s": line.ceiling_tok_s(snapshot.num_lanes) if snapshot.num_lanes else None,
    }
    figures["ceiling_tok_s"] = (ceiling_tok_s(snapshot.num_lanes, snapshot.step_ms_by_width, line)
                                if snapshot.num_lanes else None)
    figures["agents"] = [dataclasses.asdict(a) for a in snapshot.agents]
    return figures


def series_rows(feed: StepFeed) -> list[dict[str, float]]:
    columns = {name: feed.ticks.column(name) for name in TICK_COLUMNS}
    return [{name: float(columns[name][i]) for name in TICK_COLUMNS} for i in range(len(feed.ticks))]


def export_figures(path: str | Path, snapshot: MetricsSnapshot, feed: StepFeed, extra: dict[str, Any]) -> Path:
    """JSON: figures, scheduler, engine, A/B results and the plotted series. CSV: the plotted series,
    one row per refresh, after a header block of the current figures as `# name,value` lines."""
    path = Path(path)
    figures = snapshot_dict(snapshot)
    if path.suffix.lower() == ".csv":
        text = io.StringIO(newline="")
        for key, value in figures.items():
            if not isinstance(value, (dict, list)):
                text.write(f"# {key},{'' if value is None else value}\n")
        writer = csv.DictWriter(text, fieldnames=TICK_COLUMNS)
        writer.writeheader()
        for row in series_rows(feed):
            writer.writerow({k: "" if not math.isfinite(v) else f"{v:.6g}" for k, v in row.items()})
        return _written(path, text.getvalue())
    data = {"figures": figures, **extra, "series": series_rows(feed)}
    return _written(path, json.dumps(_clean(data), indent=1, default=str))


def _written(path: Path, data: str | bytes) -> Path:
    # Whole or not at all: a full disk leaves neither half an export nor a temp file; the dialog says why.
    if not write_file(path, data.encode() if isinstance(data, str) else data, lost="the export is not written"):
        raise OSError(f"could not write {path}: {unwritable_folders().get(path.parent, 'see the log')}")
    return path


def export_png(path: str | Path, widget) -> Path:
    # Encoded in memory, then written by the careful writer: Qt's own save reports success on a full disk
    # after writing nothing.
    data = QtCore.QByteArray()
    buffer = QtCore.QBuffer(data)
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    if not widget.grab().save(buffer, "PNG"):
        raise OSError(f"Qt could not encode the plots of {widget}")
    return _written(Path(path), bytes(data))
