"""The long soak: chaos rounds against an in-process server until N requests are done; resources tracked.

    python benchmarks/soak.py [--requests 10000] [--agents 64] [--round-seconds 20]

Prints, per round and at the end: requests completed, hang-ups, malformed, switches, 5xx, and the
process's RSS, threads and open file descriptors, plus engine lanes and KV left after each drain.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time

from swarm_panel.app.loadgen.chaos import ChaosConfig, run_chaos
from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B

FAST_CARD = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 1.0, "per_row_ms": 0.1})


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def drained(service: SwarmService, timeout: float = 30.0) -> bool:
    thread = service.engine_thread
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if thread.num_waiting == 0 and thread.num_running == 0 and thread.scheduler.kv_used == 0:
            return True
        time.sleep(0.05)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--round-seconds", type=float, default=20.0)
    args = parser.parse_args()
    settings = Settings(engine="modeled", port=0, num_lanes=64, max_waiting=4096)
    service = SwarmService(settings, engine_factory=lambda s: ModeledEngine(FAST_CARD, realtime=True))
    service.start()
    server = ThreadedHttpServer(service).start()
    totals = {"completed": 0, "hangups": 0, "malformed": 0, "refused": 0, "switches": 0, "5xx": 0, "wrong": 0}
    baseline = None
    round_index = 0
    try:
        while totals["completed"] + totals["hangups"] + totals["malformed"] < args.requests:
            round_index += 1
            report = asyncio.run(run_chaos(ChaosConfig(url=server.url, agents=args.agents,
                                                       seconds=args.round_seconds, seed=round_index)))
            ok = drained(service)
            for key, value in (("completed", report.completed), ("hangups", report.hangups),
                               ("malformed", report.malformed), ("refused", report.malformed_refused),
                               ("switches", report.switches), ("5xx", report.server_errors),
                               ("wrong", report.wrong_length)):
                totals[key] += value
            lanes_held = sum(lane.state != "idle" for lane in service.engine_thread.lanes())
            now = (rss_mb(), threading.active_count(), open_fds())
            baseline = baseline or now
            print(f"round {round_index}: {totals['completed'] + totals['hangups'] + totals['malformed']} requests "
                  f"so far; drained={ok} lanes held={lanes_held} kv={service.engine_thread.scheduler.kv_used}; "
                  f"RSS {now[0]:.1f} MB, threads {now[1]}, fds {now[2]}", flush=True)
    finally:
        server.stop()
        service.stop()
    print(f"\ntotals: {totals}")
    print(f"RSS after round 1 {baseline[0]:.1f} MB -> end {rss_mb():.1f} MB; threads {baseline[1]} -> "
          f"{threading.active_count()}; fds {baseline[2]} -> {open_fds()}")
    return 0 if totals["5xx"] == 0 and totals["wrong"] == 0 and totals["refused"] == totals["malformed"] else 1


if __name__ == "__main__":
    sys.exit(main())
