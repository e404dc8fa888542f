"""Draws assets/screenshot-service.png: the panel's service plot over a critical-path swarm on the modeled card.

Virtual time, so it is exact and quick: 30 s of continuous FCFS, then agent fair share, then
least-attained-service, switched live on the same scheduler. Run: python benchmarks/service_plot_screenshot.py
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6 import QtWidgets  # noqa: E402

from swarm_panel.runtime.core.config import SchedulerConfig  # noqa: E402
from swarm_panel.runtime.core.engine import VirtualClock  # noqa: E402
from swarm_panel.runtime.modeled.engine import ModeledEngine  # noqa: E402
from swarm_panel.runtime.scheduling.scheduler import Scheduler  # noqa: E402
from swarm_panel.runtime.workloads.critical_path import CriticalPathWorkload  # noqa: E402
from swarm_panel.runtime.workloads.critical_path_run import run_critical_path  # noqa: E402
from swarm_panel.ui.plots.service_plot import ServicePlot  # noqa: E402
from swarm_panel.ui.toolkit import theme  # noqa: E402

SWITCHES = ((30.0, "fair"), (60.0, "las"))
SAMPLE_S = 0.4
LENGTHS = (10, 22, 38, 55, 75, 120, 162, 225)


def main(path: str = "assets/screenshot-service.png") -> None:
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv)
    app.setStyleSheet(theme.STYLESHEET)
    theme.configure_pyqtgraph()
    plot = ServicePlot(span_s=90.0)
    plot.resize(1100, 420)
    engine = ModeledEngine()
    config = SchedulerConfig(policy="continuous", num_lanes=8)
    scheduler = Scheduler.for_engine(config, engine)
    workload = CriticalPathWorkload(workers=6, rounds=7, worker_lengths=LENGTHS, noisy_lengths=LENGTHS,
                                    plan_tokens=38, merge_tokens=55)
    clock = VirtualClock()
    state = {"next_sample": 0.0, "switches": list(SWITCHES), "rounds_shown": 0}

    def on_stats(stats) -> None:
        if stats.time < state["next_sample"]:
            return
        state["next_sample"] = stats.time + SAMPLE_S
        tokens = {t.agent: t.output_tokens for t in scheduler.service.snapshot()}
        demand = Counter(r.agent for r in scheduler.waiting)
        demand.update(lane.request.agent for lane in scheduler.lanes if lane.is_live)
        plot.observe(stats.time, tokens, demand, config.num_lanes)
        if state["switches"] and stats.time >= state["switches"][0][0]:
            _, policy = state["switches"].pop(0)
            scheduler.reconfigure(scheduler.config.with_changes(policy=policy), clock.now())
            plot.mark(stats.time, theme.POLICY_LABELS[policy])

    result = run_critical_path(engine, config, workload, clock, on_stats=on_stats, scheduler=scheduler)
    plot.show_round(result.rounds[-1])
    plot.mark(0.0, theme.POLICY_LABELS["continuous"])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    plot.grab().save(path)
    for r in result.rounds:
        print(f"round {r['round'] + 1}: {r['start']:.1f}-{r['end']:.1f} s, makespan {r['makespan']:.1f} s, "
              f"Jain {r['jain']:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
