"""What the desktop panel costs: engine throughput with the panel open vs headless, and one refresh.

    python benchmarks/ui_overhead.py [--seconds 20] [--rounds 2] [--json]

1. Throughput: the modeled RX 9070 XT in real time, the closed-loop swarm submitted straight to the
   engine thread (the same workload both ways), continuous policy; rounds alternate headless and
   panel-open (the window refreshing at 15 Hz through the Qt event loop), at 8 and at 64 lanes.
   Useful tok/s counts the steps after a warm-up.
2. Refresh: the window's timer callback (pull, ring buffers, four plots, lane timeline, table and
   status bar every sixth call) with 64-lane step records arriving between calls, after the step
   history and the feed's rings are full. Also reported: refresh plus the repaint Qt does after it.

The issue's targets: panel-open tok/s >= 95% of headless; one refresh under 10 ms with 64 lanes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swarm_panel.app.loadgen.local_swarm import LocalSwarm  # noqa: E402
from swarm_panel.app.service.engine_service import SwarmService  # noqa: E402
from swarm_panel.app.settings.schema import Settings  # noqa: E402
from swarm_panel.runtime.core.stats import StepStats  # noqa: E402
from swarm_panel.runtime.modeled.engine import ModeledEngine  # noqa: E402
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B  # noqa: E402
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS  # noqa: E402

WARMUP_S = 3.0


def service(lanes: int) -> SwarmService:
    settings = Settings(engine="modeled", policy="continuous", num_lanes=lanes, port=0)
    return SwarmService(settings, engine_factory=lambda s: ModeledEngine(RX_9070_XT_QWEN35_9B, realtime=True,
                                                                          max_lanes=max(lanes, 64)))


def useful_tok_s(svc: SwarmService, started: float, ended: float) -> float:
    steps = [s for s in svc.metrics.recent_steps() if started + WARMUP_S <= s.time <= ended]
    if len(steps) < 2:
        return 0.0
    return sum(s.useful_tokens for s in steps) / (steps[-1].time - (steps[0].time - steps[0].duration))


def run_once(lanes: int, seconds: float, panel: bool, app=None) -> float:
    svc = service(lanes)
    svc.metrics.__init__(history=1 << 16)  # keep every step of the run for the count
    svc.start()
    window = None
    if panel:
        from PySide6 import QtCore

        from swarm_panel.ui.shell.main_window import MainWindow

        window = MainWindow(svc)
        window.show()
    swarm = LocalSwarm(svc.engine_thread, agents=lanes, lengths=ARTICLE_LENGTHS)
    started = time.monotonic()
    swarm.start()
    if panel:
        QtCore.QTimer.singleShot(int(seconds * 1000), app.quit)
        app.exec()
    else:
        time.sleep(seconds)
    ended = time.monotonic()
    swarm.stop()
    tok_s = useful_tok_s(svc, started, ended)
    if window is not None:
        window.close()
    svc.stop()
    return tok_s


def throughput(seconds: float, rounds: int, app, lane_counts=(8, 64)) -> list[dict]:
    results = []
    for lanes in lane_counts:
        headless, panel = [], []
        for _ in range(rounds):
            headless.append(run_once(lanes, seconds, panel=False))
            panel.append(run_once(lanes, seconds, panel=True, app=app))
        h, p = statistics.mean(headless), statistics.mean(panel)
        results.append({"lanes": lanes, "headless_tok_s": h, "panel_tok_s": p, "ratio": p / h if h else 0.0,
                        "headless_rounds": headless, "panel_rounds": panel})
    return results


def synthetic_step(i: int, t: float, lanes: int = 64) -> StepStats:
    pattern = ("D" * 40 + "x" * 12 + "P" * 4 + "." * 4 + " " * 4)[:lanes]
    pattern = pattern[i % lanes:] + pattern[: i % lanes]
    agents = [f"agent-{k + 1:02d}" for k in range(lanes)]
    return StepStats(index=i, time=t, duration=0.09, policy="naive" if (i // 500) % 2 else "continuous",
                     num_lanes=lanes, width_held=52, live_lanes=48, padding_lanes=12, decode_rows=40, prefill_rows=4,
                     prefill_tokens=256, useful_tokens=40, queue_depth=30, kv_used=20000 + i, kv_capacity=311296,
                     finished=1, lanes=pattern, itl=[(a, 0.09) for a in agents[:40]], e2e=[(agents[i % lanes], 9.0)])


def refresh_timing(app, calls: int = 300) -> dict:
    from swarm_panel.ui.shell.main_window import MainWindow

    svc = service(64)
    svc.start()
    window = MainWindow(svc)
    window.show()
    window.timer.stop()
    t = time.monotonic() - 400.0
    i = 0
    for _ in range(17000):  # fills the metrics history (2048) and the feed's step ring (16384)
        svc.metrics.observe(synthetic_step(i, t))
        i, t = i + 1, t + 0.02
    window.refresh()
    window.refresh_seconds.clear()
    with_paint = []
    for _ in range(calls):
        for _ in range(4):  # about what a 64-lane batch steps in one 66 ms tick
            svc.metrics.observe(synthetic_step(i, t))
            i, t = i + 1, t + 0.016
        started = time.perf_counter()
        window.refresh()
        app.processEvents()  # the repaint that follows
        with_paint.append(time.perf_counter() - started)
    refresh = sorted(window.refresh_seconds)
    window.close()
    svc.stop()

    def pct(values, q):
        return sorted(values)[min(len(values) - 1, round(q / 100 * (len(values) - 1)))] * 1e3

    return {"calls": calls, "refresh_ms_p50": pct(refresh, 50), "refresh_ms_p95": pct(refresh, 95),
            "refresh_ms_max": max(refresh) * 1e3, "with_repaint_ms_p50": pct(with_paint, 50),
            "with_repaint_ms_p95": pct(with_paint, 95)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--lanes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("SWARM_PANEL_CONFIG_FILE", "/nonexistent/swarm-panel.toml")
    from PySide6 import QtWidgets

    from swarm_panel.app.service.engine_service import share_the_interpreter
    from swarm_panel.ui.toolkit import theme

    share_the_interpreter()  # what the app does at start
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    theme.configure_pyqtgraph()
    app.setStyleSheet(theme.STYLESHEET)
    report = {"refresh": refresh_timing(app)}
    if not args.skip_throughput:
        report["throughput"] = throughput(args.seconds, args.rounds, app, args.lanes)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    r = report["refresh"]
    print(f"refresh with 64 lanes ({r['calls']} calls): p50 {r['refresh_ms_p50']:.2f} ms, p95 {r['refresh_ms_p95']:.2f} ms, "
          f"max {r['refresh_ms_max']:.2f} ms; with the repaint: p50 {r['with_repaint_ms_p50']:.2f} ms, "
          f"p95 {r['with_repaint_ms_p95']:.2f} ms")
    for row in report.get("throughput", []):
        print(f"{row['lanes']:>2} lanes: headless {row['headless_tok_s']:.1f} tok/s, panel open {row['panel_tok_s']:.1f} "
              f"tok/s, ratio {100 * row['ratio']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
