"""The panel's cost on the real default model: the same real-agents swarm headless and with the panel open.

    python benchmarks/panel_overhead.py [--seconds 60] [--rounds 2] [--agents 8] [--json]

Headless: `swarm-panel serve` with the swarm as a separate client process (`swarm-panel swarm
--real-agents`). Panel: `swarm-panel gui --swarm N` (offscreen Qt), whose built-in launcher runs the
same real agents over HTTP inside the panel's own process, next to the plots it repaints. Both use
the default engine: the bundled model, default threads. Rounds alternate; each samples the server's
rolling `generation_tokens_per_second` gauge twice a second after a warm-up and averages it.

The issue's target: panel-open tok/s at least 85% of headless.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
GAUGE = "swarm_panel:generation_tokens_per_second"
WARMUP_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up in {timeout:.0f} s")


def sample_tok_s(url: str, seconds: float) -> float:
    values = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == GAUGE:
                    values.append(sample.value)
        time.sleep(0.5)
    return statistics.mean(values) if values else 0.0


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "swarm_panel.ui.shell.cli", *args]


def headless_round(agents: int, seconds: float) -> float:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(command("serve", "--port", str(port)), cwd=ROOT, stderr=subprocess.DEVNULL)
    swarm = None
    try:
        wait_ready(url)
        swarm = subprocess.Popen(command("swarm", "--url", url, "--agents", str(agents), "--real-agents",
                                         "--seconds", str(WARMUP_S + seconds + 30)),
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(WARMUP_S)
        return sample_tok_s(url, seconds)
    finally:
        if swarm is not None:
            stop(swarm)
        stop(server)


def panel_round(agents: int, seconds: float) -> float:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
        panel = subprocess.Popen(command("gui", "--port", str(port), "--swarm", str(agents), "--quit-after",
                                         str(WARMUP_S + seconds + 60), "--settings-file", f"{tmp}/panel.ini"),
                                 cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(url)
            time.sleep(WARMUP_S)
            return sample_tok_s(url, seconds)
        finally:
            stop(panel)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    headless, panel = [], []
    for i in range(args.rounds):
        headless.append(headless_round(args.agents, args.seconds))
        panel.append(panel_round(args.agents, args.seconds))
        if not args.json:
            print(f"round {i + 1}: headless {headless[-1]:.1f} tok/s, panel open {panel[-1]:.1f} tok/s", flush=True)
    h, p = statistics.median(headless), statistics.median(panel)
    report = {"agents": args.agents, "seconds": args.seconds, "headless_tok_s": headless, "panel_tok_s": panel,
              "ratio": p / h if h else 0.0}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"median: headless {h:.1f} tok/s, panel open {p:.1f} tok/s: {100 * report['ratio']:.0f}% of headless")
    return 0


if __name__ == "__main__":
    sys.exit(main())
