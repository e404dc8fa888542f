"""Draws assets/screenshot-ceiling.png: the modeled card's ceiling against context, per KV type, with
a live swarm's point on it.

Virtual time, so it is exact and quick: eight agents in multi-turn conversations behind a shared
2,000-token system prompt run continuously on the modeled card (f16 KV, 8 lanes); the marker is
where they sit 20 s in. Run: python benchmarks/ceiling_plot_screenshot.py [PATH] [KV_TYPE]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6 import QtWidgets  # noqa: E402

from swarm_panel.runtime.core.config import SchedulerConfig  # noqa: E402
from swarm_panel.runtime.core.engine import VirtualClock  # noqa: E402
from swarm_panel.runtime.modeled.engine import ModeledEngine  # noqa: E402
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B  # noqa: E402
from swarm_panel.runtime.serving.metrics import MetricsAggregator  # noqa: E402
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop  # noqa: E402
from swarm_panel.runtime.workloads.workload import SwarmWorkload  # noqa: E402
from swarm_panel.ui.plots.ceiling_plot import CeilingPlot  # noqa: E402
from swarm_panel.ui.toolkit import theme  # noqa: E402

LANES = 8
SNAPSHOT_AT_S = 20.0


def main(path: str = "assets/screenshot-ceiling.png", kv_type: str = "f16") -> None:
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv)
    app.setStyleSheet(theme.STYLESHEET)
    theme.configure_pyqtgraph()
    profile = RX_9070_XT_QWEN35_9B.with_kv_type(kv_type)
    engine = ModeledEngine(profile)
    metrics = MetricsAggregator()
    workload = SwarmWorkload(agents=8, requests_per_agent=6, conversation=True, system_tokens=2000, tool_tokens=256)
    taken = {}

    def on_stats(stats) -> None:
        metrics.observe(stats)
        if "snapshot" not in taken and stats.time >= SNAPSHOT_AT_S:
            taken["snapshot"] = metrics.snapshot()

    run_closed_loop(engine, SchedulerConfig(policy="continuous", num_lanes=LANES), workload, VirtualClock(),
                    on_stats=on_stats)
    snapshot = taken.get("snapshot") or metrics.snapshot()
    plot = CeilingPlot(profile)
    plot.resize(1100, 520)
    plot.set_lanes(LANES)
    plot.show_swarm(snapshot, engine.sequence_state_tokens)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    plot.grab().save(path)
    context, tok_s = plot.marker_position()
    print(f"{path}: the swarm at {context:,.0f} tokens of context, {tok_s:.1f} tok/s over {snapshot.width_held} "
          f"lanes ({kv_type} KV)")


if __name__ == "__main__":
    main(*sys.argv[1:])
