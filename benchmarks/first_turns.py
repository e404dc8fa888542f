"""Whether swarm-panel and llama-server give the same greedy reply to each real agent's first turn.

One non-streamed first turn per agent (swarm_panel.app.loadgen.swarm's real agents, greedy, the same repeat penalty) to
each server in turn, on the bundled model's F16 copy; prints how many replies are identical. Later
turns are not compared: llama.cpp's CPU kernels are not batch-invariant, so they drift apart.

    PYTHONPATH=. python benchmarks/first_turns.py --llama-server PATH [--agents 4]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from benchmarks.peer_servers import free_port, wait_healthy
from swarm_panel.app.loadgen.swarm import SwarmConfig, _Swarm
from swarm_panel.app.service.engine_factory import resolve_model


def replies(command: list[str], bodies: list[dict]) -> list[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_healthy(url, proc)
        return [httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).json()["choices"][0]["message"]
                ["content"] for body in bodies]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--n-ctx", type=int, default=32768)
    args = parser.parse_args()
    model = resolve_model(None)[0]
    swarm = _Swarm(SwarmConfig(url="-", agents=args.agents, seconds=1, real_agents=True), None)
    bodies = [dict(swarm._body(agent, 0), stream=False) for agent in range(args.agents)]
    for body in bodies:
        body.pop("stream_options")
    peer = [str(args.llama_server), "-m", str(model), "-np", "8", "-c", str(args.n_ctx), "--no-webui"]
    ours = replies([sys.executable, "-m", "swarm_panel.app.cli.main", "serve", "--engine", "llama", "--model", str(model),
                    "--num-lanes", "8", "--n-ctx", str(args.n_ctx)], bodies)
    for name, command in (("llama-server", peer), ("llama-server -fa off", [*peer, "-fa", "off"])):
        theirs = replies(command, bodies)
        same = sum(a == b for a, b in zip(ours, theirs))
        print(f"swarm-panel against {name}: {same} of {len(bodies)} first-turn replies identical "
              f"(characters: {[len(t) for t in ours]} against {[len(t) for t in theirs]})")


if __name__ == "__main__":
    main()
