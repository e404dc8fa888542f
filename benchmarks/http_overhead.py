"""What the HTTP path costs: the same closed-loop swarm in-process and over HTTP, on the modeled engine in real time.

    python benchmarks/http_overhead.py [--agents 8] [--requests-per-agent 2] [--num-lanes N]

In-process is `swarm-panel bench --engine modeled --realtime --policy continuous`; over HTTP a
`swarm-panel serve --engine modeled` subprocess on a free port is driven by `swarm_panel.app.loadgen.swarm` (streamed chat
requests, EOS suppressed, max_tokens = the workload's length, lengths 40..900 cycling offset by agent).
Prints both aggregate tok/s and their ratio (target: at least 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from swarm_panel.app.loadgen.swarm import SwarmConfig, run_swarm
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS


def in_process(agents: int, requests: int, num_lanes: int, prefill_chunk: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "swarm_panel.app.cli.main", "bench", "--engine", "modeled", "--realtime", "--policy", "continuous",
         "--agents", str(agents), "--requests-per-agent", str(requests), "--num-lanes", str(num_lanes),
         "--prefill-chunk", str(prefill_chunk), "--json"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)["results"][0]


def over_http(agents: int, requests: int, num_lanes: int, prefill_chunk: int) -> dict:
    # No config file: only the flags here decide.
    missing = os.path.join(tempfile.gettempdir(), "swarm-panel-http-overhead-none.toml")
    env = dict(os.environ, SWARM_PANEL_CONFIG_FILE=missing, PYTHONUNBUFFERED="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "swarm_panel.app.cli.main", "serve", "--engine", "modeled", "--port", "0", "--policy", "continuous",
         "--num-lanes", str(num_lanes), "--prefill-chunk", str(prefill_chunk), "--max-waiting", "100000"],
        stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line and server.poll() is not None:
                raise RuntimeError("swarm-panel serve exited before it listened")
            match = re.search(r"on (http://\S+)/v1", line)
            url = match.group(1) if match else None
        config = SwarmConfig(url=url, agents=agents, requests_per_agent=requests, lengths=ARTICLE_LENGTHS)
        return asyncio.run(run_swarm(config)).as_dict()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--requests-per-agent", type=int, default=2)
    parser.add_argument("--num-lanes", type=int, default=None, help="lanes (default: as many as agents)")
    parser.add_argument("--prefill-chunk", type=int, default=512)
    args = parser.parse_args()
    num_lanes = args.num_lanes or min(args.agents, 256)
    local = in_process(args.agents, args.requests_per_agent, num_lanes, args.prefill_chunk)
    remote = over_http(args.agents, args.requests_per_agent, num_lanes, args.prefill_chunk)
    ratio = remote["tok_s"] / local["tok_s"]
    print(json.dumps({
        "agents": args.agents, "requests_per_agent": args.requests_per_agent, "num_lanes": num_lanes,
        "in_process": {"tok_s": round(local["tok_s"], 1), "tokens": local["useful_tokens"],
                       "seconds": round(local["seconds"], 2)},
        "http": {"tok_s": round(remote["tok_s"], 1), "tokens": remote["tokens"], "seconds": round(remote["seconds"], 2),
                 "errors": remote["errors"], "ttft_p50": remote["ttft_p50"]},
        "ratio": round(ratio, 3),
    }, indent=2))
    return 0 if remote["errors"] == 0 and remote["tokens"] == local["useful_tokens"] else 1


if __name__ == "__main__":
    sys.exit(main())
