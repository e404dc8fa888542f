"""Cache-affinity routing against round-robin: multi-turn agents through the gateway to two backends.

Starts two `swarm-panel serve` backends and `swarm-panel gateway` on loopback, then runs rounds that
alternate the gateway's routing (PUT /v1/scheduler). Every round: AGENTS closed-loop agents in GROUPS
groups, each group sharing a system prompt, each agent resending its growing conversation for TURNS
turns. Each round salts its system prompts, so no round reuses KV an earlier one left behind.

Reported per routing (summed over its rounds): prompt tokens, of which recomputed (prompt minus
usage.prompt_tokens_details.cached_tokens), the cached share, turn latency p50/p95, and aggregate
output tok/s (output tokens over the round's wall time).

    python benchmarks/gateway_affinity.py --model /tmp/tiny.gguf --agents 12 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swarm_panel.app.service import panel_key_file  # noqa: E402
from swarm_panel.runtime.serving.metrics import percentile  # noqa: E402
from swarm_panel.runtime.workloads.workload import prompt_text, system_text, tool_text  # noqa: E402

LENGTHS = (16, 24, 32, 48)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _process(args: list[str], log: Path):
    with log.open("w") as out:
        env = dict(os.environ, PYTHONUNBUFFERED="1", SWARM_PANEL_CONFIG_FILE=str(log.parent / "absent.toml"))
        proc = subprocess.Popen([sys.executable, "-m", "swarm_panel.app.cli.main", *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not come up")


async def _agent(client: httpx.AsyncClient, agent: int, system: str, args, out: dict) -> None:
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": prompt_text(agent, 0, args.prompt_tokens)}]
    for turn in range(args.turns):
        body = {"model": "m", "messages": messages, "max_tokens": LENGTHS[(agent + turn) % len(LENGTHS)],
                "temperature": 0.0, "ignore_eos": True, "user": f"agent-{agent:02d}"}
        started = time.monotonic()
        response = await client.post("/v1/chat/completions", json=body)
        if response.status_code != 200:
            out["errors"] += 1
            continue
        result = response.json()
        out["latency"].append(time.monotonic() - started)
        usage = result["usage"]
        out["prompt"] += usage["prompt_tokens"]
        out["cached"] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        out["output"] += usage["completion_tokens"]
        messages += [{"role": "assistant", "content": result["choices"][0]["message"]["content"]},
                     {"role": "user", "content": tool_text(agent, turn, args.tool_tokens)}]


async def _round(url: str, args, salt: int) -> dict:
    out = {"latency": [], "prompt": 0, "cached": 0, "output": 0, "errors": 0}
    systems = [f"[round {salt}, team {g}] " + system_text(args.system_tokens) for g in range(args.groups)]
    limits = httpx.Limits(max_connections=args.agents + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        started = time.monotonic()
        await asyncio.gather(*(_agent(client, a, systems[a % args.groups], args, out) for a in range(args.agents)))
        out["seconds"] = time.monotonic() - started
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="GGUF for both backends")
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--groups", type=int, default=3, help="distinct shared system prompts")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="alternating affinity / round-robin")
    parser.add_argument("--system-tokens", type=int, default=300)
    parser.add_argument("--prompt-tokens", type=int, default=24)
    parser.add_argument("--tool-tokens", type=int, default=20)
    parser.add_argument("--num-lanes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-affinity-"))
    with ExitStack() as stack:
        urls = []
        for i in range(2):
            port = _free_port()
            log = tmp / f"backend{i}.log"
            proc = stack.enter_context(_process(
                ["serve", "--engine", "llama", "--model", str(args.model), "--port", str(port), "--threads",
                 str(args.threads), "--num-lanes", str(args.num_lanes), "--n-ctx", "32768"], log))
            urls.append((f"http://127.0.0.1:{port}", proc, log))
        for url, proc, log in urls:
            _wait(url, proc, log)
        log = tmp / "gateway.log"
        gateway_args = ["gateway", "--port", "0"] + [a for url, _, _ in urls for a in ("--backend", url)]
        proc = stack.enter_context(_process(gateway_args, log))
        deadline = time.monotonic() + 60
        while not (match := re.search(r"gateway on (http://\S+)/v1", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log.read_text())
            time.sleep(0.1)
        gateway = match.group(1)
        totals: dict[str, dict] = defaultdict(lambda: {"latency": [], "prompt": 0, "cached": 0, "output": 0,
                                                       "errors": 0, "seconds": 0.0, "rounds": []})
        for r in range(args.rounds):
            routing = ("affinity", "round-robin")[r % 2]
            steer = {"Authorization": f"Bearer {panel_key_file.read(gateway)}"}  # the key the gateway published
            httpx.put(f"{gateway}/v1/scheduler", json={"routing": routing}, headers=steer).raise_for_status()
            result = asyncio.run(_round(gateway, args, salt=r))
            t = totals[routing]
            for key in ("prompt", "cached", "output", "errors", "seconds"):
                t[key] += result[key]
            t["latency"] += result["latency"]
            t["rounds"].append(result["output"] / result["seconds"])
            print(f"round {r + 1} {routing:11s}: {result['output'] / result['seconds']:6.1f} tok/s, "
                  f"recomputed {result['prompt'] - result['cached']:,} of {result['prompt']:,} prompt tokens, "
                  f"{result['errors']} errors", flush=True)
    print(f"\n{args.agents} agents, {args.groups} shared system prompts (~{args.system_tokens} English tokens each), "
          f"{args.turns} turns, 2 backends (lanes {args.num_lanes}), {args.rounds} rounds alternating")
    print(f"{'routing':12s} {'prompt tok':>11s} {'recomputed':>11s} {'cached':>7s} {'p50 s':>7s} {'p95 s':>7s} "
          f"{'tok/s':>7s}  per round")
    for routing in ("affinity", "round-robin"):
        t = totals[routing]
        if not t["latency"]:
            continue
        print(f"{routing:12s} {t['prompt']:>11,} {t['prompt'] - t['cached']:>11,} {t['cached'] / t['prompt']:>6.1%} "
              f"{percentile(t['latency'], 50):>7.2f} {percentile(t['latency'], 95):>7.2f} "
              f"{t['output'] / t['seconds']:>7.1f}  {', '.join(f'{x:.1f}' for x in t['rounds'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
