"""Side by side over HTTP: swarm-panel serve vs llama.cpp's llama-server vs llama_cpp.server.

Every server gets the same GGUF and the same closed-loop agent swarm (swarm_panel.app.loadgen.swarm, the load generator
behind `swarm-panel swarm`), in alternating rounds so drift on a shared machine hits all alike.

    python benchmarks/peer_servers.py --llama-server PATH [--model GGUF] [--rounds 2] [--seconds 30]
    python benchmarks/peer_servers.py --llama-server PATH --real-agents [--seconds 60]   # the bundled model
    python benchmarks/peer_servers.py --llama-server PATH --real-agents --turns 4   # every chat to its end
    python benchmarks/peer_servers.py --llama-server PATH --requests 8   # the same 64 requests for each server
    python benchmarks/peer_servers.py --llama-server PATH --long-prompt-tokens 500   # one agent pastes files
    python benchmarks/peer_servers.py --llama-server PATH --real-agents --turns 4 --agents 16 --lanes 8

--real-agents: multi-turn coding chats (swarm_panel.app.loadgen.swarm's real agents) on the bundled SmolLM2 model, natural
stops, greedy with the same repeat penalty for every server, so all of them see the same tokens. On a
CPU swarm-panel serves its F16 copy of that model by default, so every server gets that file.

--checkout DIR adds swarm-panel served from another checkout (a worktree of an older commit, say) to
the rotation, so a change is measured against what came before it in the same alternating rounds.

--ours-variant NAME=FLAGS adds swarm-panel served with those extra flags as swarm-panel-NAME, so a
setting the default does not choose (--kv-unified, say) is measured in the same rounds.

--busy-cores N runs N processes that each keep a core busy during every round, each in a session of
its own like any other program on the desktop: how each server copes with a neighbour on its CPUs.

--peer-fa-off adds llama-server with flash attention off to the rotation: swarm-panel's default picks
the kernel its probe timed faster on this CPU (swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe), so where that is the plain
path this column separates what the kernel choice is worth from the rest.

llama-server must come from the llama.cpp tree vendored in the installed llama-cpp-python's sdist,
so both run the same kernels; `benchmarks/build_llama_server.sh` builds it. llama_cpp.server needs
`pip install sse-starlette starlette-context` (skipped with a note when missing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from swarm_panel.app.loadgen.swarm import SwarmConfig, run_swarm
from swarm_panel.app.service.engine_factory import resolve_model
from swarm_panel.runtime.models.demo import ensure_demo_model

try:
    from benchmarks.peer_workloads import WORKLOADS, cut_to_tokens, harness_head, workload_model
except ModuleNotFoundError:  # run as `python benchmarks/peer_servers.py`: this folder is on the path
    from peer_workloads import WORKLOADS, cut_to_tokens, harness_head, workload_model

SCALED_LENGTHS = (10, 22, 38, 55, 75, 120, 162, 225)  # the article's 40..900, divided by four


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eog_tokens(model: Path) -> tuple[int, ...]:
    from swarm_panel.runtime.llama.engine import LlamaEngine

    with LlamaEngine(model, max_lanes=1, n_ctx=256) as engine:
        return tuple(sorted(engine.vocab.eog_tokens))


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was healthy")
        try:
            # llama_cpp.server has no /health; every server here lists its model once loaded.
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} not healthy after {timeout:.0f} s")


def server_commands(args: argparse.Namespace, model: Path, port: int) -> dict[str, list[str]]:
    # No --threads: each server takes its own default (the default configuration is what is compared).
    ours_threads = ["--threads", str(args.threads)] if args.threads else []
    peer_threads = ["-t", str(args.threads), "-tb", str(args.threads)] if args.threads else []
    commands = {
        "swarm-panel": [sys.executable, "-m", "swarm_panel.app.cli.main", "serve", "--engine", "llama", "--model", str(model),
                        "--port", str(port), "--num-lanes", str(args.lanes), "--n-ctx", str(args.n_ctx),
                        *ours_threads, "--policy", "continuous", *args.ours_arg],
        "llama-server": [str(args.llama_server), "-m", str(model), "--port", str(port), "-np", str(args.lanes),
                         "-c", str(args.n_ctx), *peer_threads, "--no-webui", *args.peer_arg],
    }
    for checkout in args.checkout:
        # The same serve command run from another checkout (python -m puts the working directory first).
        commands[f"swarm-panel@{checkout.name}"] = commands["swarm-panel"]
    for name, flags in args.ours_variant:
        commands[f"swarm-panel-{name}"] = [*commands["swarm-panel"], *flags]
    if args.peer_fa_off:
        # Where swarm-panel's probe kept the plain path, this shows what that choice alone is worth.
        commands["llama-server-fa-off"] = [*commands["llama-server"], "-fa", "off"]
    if importlib.util.find_spec("sse_starlette") and importlib.util.find_spec("starlette_context"):
        commands["llama_cpp.server"] = [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
                                        "--port", str(port), "--n_ctx", "2048",
                                        *(["--n_threads", str(args.threads)] if args.threads else []),
                                        # Its default cancels a running stream whenever a new request arrives.
                                        "--interrupt_requests", "False"]
    else:
        print("llama_cpp.server skipped: pip install sse-starlette starlette-context", file=sys.stderr)
    return commands


def selected(names, only: list[str] | None) -> list[str]:
    """The servers --only keeps. A variant (swarm-panel-NAME, swarm-panel@CHECKOUT, llama-server-fa-off)
    goes with its base server, because asking for a variant's column and naming only the base servers
    otherwise drops it without a word."""
    if not only:
        return list(names)
    return [name for name in names
            if name in only or any(name.startswith((f"{base}-", f"{base}@")) for base in only)]


def swarm_config(args: argparse.Namespace, url: str, eog: tuple[int, ...]) -> SwarmConfig:
    """The load for one round. With --turns every agent's conversation runs to its end, so each
    server is timed over the same turns; a window would count only the turns a slower server reaches,
    which leaves its later, longer-context turns out of its latency figures. --round-limit still cuts such a
    round, for a server that may stall: its tok/s then counts what it served in that time."""
    seconds = args.round_limit if args.turns or args.requests else args.seconds
    if args.real_agents:
        return SwarmConfig(url=url, agents=args.agents, seconds=seconds, real_agents=True, turns=args.turns,
                           reply_tokens=args.reply_tokens)
    multi_turn = {"turns": args.turns, "system_tokens": args.system_tokens, "tool_tokens": args.tool_tokens,
                  "system_prompt": args.head, "tool_seconds": args.tool_seconds}
    return SwarmConfig(url=url, agents=args.agents, seconds=seconds, lengths=args.lengths,
                       prompt_tokens=args.prompt_tokens, long_prompt_tokens=args.long_prompt_tokens, eos_token_ids=eog,
                       requests_per_agent=None if args.turns else args.requests, **(multi_turn if args.turns else {}))


def server_state(url: str) -> str:
    try:
        return httpx.get(f"{url}/health", timeout=5).text
    except httpx.HTTPError as exc:
        return f"nothing ({exc!r})"


@contextlib.contextmanager
def busy_cores(count: int):
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def run_round(name: str, command: list[str], port: int, args: argparse.Namespace, eog: tuple[int, ...]) -> dict:
    with busy_cores(args.busy_cores):
        return _serve_round(name, command, port, args, eog)


def _serve_round(name: str, command: list[str], port: int, args: argparse.Namespace, eog: tuple[int, ...]) -> dict:
    url = f"http://127.0.0.1:{port}"
    log = open(Path(args.logs) / f"{name}.log", "ab")
    cwd = next((c for c in args.checkout if name == f"swarm-panel@{c.name}"), None)
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    try:
        wait_healthy(url, proc)
        if args.head:
            parent_turn(url, args.head)
        report = asyncio.run(run_swarm(swarm_config(args, url, eog)))
        if report.requests == 0:
            # Seen once on this shared machine and not reproduced: say what the server was doing.
            print(f"{name}: no request finished; /health said {server_state(url)}", file=sys.stderr)
        return report.as_dict()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def parent_turn(url: str, head: str) -> None:
    """The parent agent's first turn, untimed: it computes the harness head its sub-agents then share."""
    body = {"model": "swarm-panel", "max_tokens": 4, "temperature": 0.0, "user": "parent",
            "messages": [{"role": "system", "content": head}, {"role": "user", "content": "Plan the task."}]}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=3600).raise_for_status()


def range_of(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(",")
    try:
        return (float(low), float(high)) if sep else (float(low), float(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH seconds, got {text!r}") from None


def beside_long(report: dict) -> str:
    """The other agents' figures when the first one sends long prompts."""
    short = report.get("short_prompts")
    if not short:
        return ""
    return (f"\n{'':<25}beside the long prompt: TTFT p50 {1e3 * (short['ttft_p50'] or 0):6.0f} ms"
            f"  p95 {1e3 * (short['ttft_p95'] or 0):6.0f} ms  turn p95 {short['latency_p95'] or 0:5.1f} s")


def follow_ups(report: dict) -> str:
    """Prompt tokens the server computed per follow-up turn, where the workload has them."""
    p50, p95 = report.get("follow_up_computed_p50"), report.get("follow_up_computed_p95")
    return "" if p95 is None else f"  follow-up computed p50 {p50:,.0f} p95 {p95:,.0f}"


def cached_share(report: dict) -> float:
    """Prompt tokens the server says it served from its cache (usage.prompt_tokens_details.cached_tokens)."""
    return report["cached_tokens"] / report["prompt_tokens"] if report["prompt_tokens"] else 0.0


def variant(text: str) -> tuple[str, list[str]]:
    name, sep, flags = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=FLAGS, got {text!r}")
    return name, shlex.split(flags)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=list(WORKLOADS), default=None,
                        help="a named workload (benchmarks/peer_workloads.py): its settings become the defaults")
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama-server's binary (benchmarks/build_llama_server.sh); not needed with --only swarm-panel")
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the demo model)")
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=None,
                        help="sequences each server runs at once (default: one per agent); fewer than the agents "
                             "is a swarm larger than its lanes, whose conversations wait outside the streams")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--long-prompt-tokens", type=int, default=0,
                        help="the first agent's prompts are this long (a file pasted whole); the other agents' "
                             "TTFT and turn latency are printed apart")
    parser.add_argument("--lengths", type=lambda t: tuple(int(v) for v in t.split(",")), default=SCALED_LENGTHS)
    parser.add_argument("--turns", type=int, default=None,
                        help="multi-turn conversations of this many turns, run to completion (not --seconds)")
    parser.add_argument("--requests", type=int, default=None,
                        help="single-turn requests per agent, all run to their end (not --seconds); "
                             "8 gives every agent each of the 8 lengths once")
    parser.add_argument("--round-limit", type=float, default=None, metavar="SECONDS",
                        help="with --turns or --requests: cut a round at this many seconds (a server that stalls); "
                             "its tok/s then counts what it served by then, and its request count shows how far "
                             "it got")
    parser.add_argument("--system-tokens", type=int, default=0, help="shared system prompt, about this many tokens")
    parser.add_argument("--tool-tokens", type=int, default=64, help="tool result appended each turn")
    parser.add_argument("--tool-seconds", type=range_of, default=(0.0, 0.0), metavar="LOW,HIGH",
                        help="with --turns: each tool call takes a time drawn from this range (per agent, the same "
                             "for every server), so agents come back in an irregular order")
    parser.add_argument("--harness-head", choices=["claude-code", "qwen-code", "codex", "opencode"], default=None,
                        help="with --turns: the agents are sub-agents sharing this harness's captured system prompt "
                             "and tools, which an untimed parent turn computes before each round")
    parser.add_argument("--head-tokens", type=int, default=20_000,
                        help="with --harness-head: its first this many tokens in the model's vocabulary")
    parser.add_argument("--model-kind", choices=["qwen35", "tiny"], default=None,
                        help="without --model: a random-weight model the project writes (qwen35: the hybrid demo)")
    parser.add_argument("--real-agents", action="store_true",
                        help="real multi-turn coding chats with natural stops, for --seconds (default model: the "
                             "bundled SmolLM2, as swarm-panel serves it on a CPU)")
    parser.add_argument("--reply-tokens", type=int, default=256, help="with --real-agents: most tokens per reply")
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for every server (default: each server's own default)")
    parser.add_argument("--busy-cores", type=int, default=0,
                        help="processes that each keep a core busy during every round (a neighbour on the CPU)")
    parser.add_argument("--only", action="append", default=None,
                        help="run only these servers and their variants (repeatable)")
    parser.add_argument("--ours-arg", action="append", default=[],
                        help="extra flag for `swarm-panel serve` (repeatable), e.g. --ours-arg=--no-prefix-cache")
    parser.add_argument("--peer-arg", action="append", default=[],
                        help="extra flag for llama-server (repeatable), e.g. --peer-arg=--kv-unified")
    parser.add_argument("--ours-variant", type=variant, action="append", default=[], metavar="NAME=FLAGS",
                        help="also run swarm-panel serve with these flags as swarm-panel-NAME (repeatable), "
                             "e.g. --ours-variant 'unified=--kv-unified'")
    parser.add_argument("--peer-fa-off", action="store_true",
                        help="also run llama-server with flash attention off (llama-server-fa-off)")
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="also run swarm-panel serve from this checkout (e.g. a worktree of an older commit)")
    parser.add_argument("--logs", default="/tmp/peer-bench-logs")
    parser.add_argument("--json", action="store_true")
    chosen, _ = parser.parse_known_args(argv)
    if chosen.workload:
        parser.set_defaults(**WORKLOADS[chosen.workload])
    args = parser.parse_args(argv)
    args.lanes = args.lanes or args.agents
    args.head = None
    if args.llama_server is None and any(name.startswith("llama-server")
                                         for name in selected(["llama-server"], args.only)):
        parser.error("--llama-server PATH is needed unless --only leaves llama-server out")
    return args


def prepare(args: argparse.Namespace) -> tuple[Path, tuple[int, ...]]:
    """The model the servers get and its end-of-generation tokens; sets args.head for a harness head."""
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    model = args.model or (resolve_model(None)[0] if args.real_agents else
                           workload_model(args.model_kind) if args.model_kind else ensure_demo_model())
    if args.harness_head:
        args.head = cut_to_tokens(harness_head(args.harness_head), model, args.head_tokens)
    return model, eog_tokens(model)


def main() -> int:
    args = parse_args()
    model, eog = prepare(args)
    results: dict[str, list[dict]] = {}
    names = selected(server_commands(args, model, 0), args.only)
    width = max([17, *map(len, names)])
    for round_index in range(args.rounds):
        port = free_port()
        commands = server_commands(args, model, port)
        for name in names:
            command = commands[name]
            report = run_round(name, command, port, args, eog)
            results.setdefault(name, []).append(report)
            print(f"round {round_index + 1} {name:<{width}} {report['tok_s']:7.1f} tok/s  requests {report['requests']:4d}"
                  f"  errors {report['errors']}  TTFT p50 {1e3 * (report['ttft_p50'] or 0):6.0f} ms"
                  f"  p95 {1e3 * (report['ttft_p95'] or 0):6.0f} ms  turn p50 {report['latency_p50'] or 0:5.1f} s"
                  f"  p95 {report['latency_p95'] or 0:5.1f} s  cached {cached_share(report):4.0%}{follow_ups(report)}"
                  f"  {report['seconds']:.1f} s{beside_long(report)}", flush=True)
    summary = {name: statistics.median(r["tok_s"] for r in runs) for name, runs in results.items()}
    base = summary.get("swarm-panel")
    if args.real_agents:
        shape = (f"real agents ({args.turns}-turn chats, run to the end)" if args.turns
                 else f"real agents (4-turn chats), {args.seconds:.0f} s")
    elif args.turns:
        shape = f"lengths {list(args.lengths)}, {args.turns} turns, system prompt ~{args.system_tokens} tokens"
    elif args.requests:
        shape = f"lengths {list(args.lengths)}, {args.requests} requests per agent, run to the end"
    elif args.long_prompt_tokens:
        shape = f"lengths {list(args.lengths)}, agent 1's prompts ~{args.long_prompt_tokens} tokens, {args.seconds:.0f} s"
    else:
        shape = f"lengths {list(args.lengths)}, {args.seconds:.0f} s"
    if args.workload:
        shape = f"workload {args.workload}: {shape}"
    if args.head:
        shape += f", sub-agents sharing {args.harness_head}'s head"
    if args.tool_seconds[1]:
        shape += f", tools {args.tool_seconds[0]:g}-{args.tool_seconds[1]:g} s"
    if args.round_limit and (args.turns or args.requests):
        shape += f", each round cut at {args.round_limit:g} s"
    beside = f", beside {args.busy_cores} busy core(s)" if args.busy_cores else ""
    lanes = f" on {args.lanes} lanes" if args.lanes != args.agents else ""
    print(f"\n{args.agents} agents{lanes}, {shape} x {args.rounds} rounds, model {model.name}{beside}")
    for name, runs in results.items():
        tok_s = summary[name]
        ratio = f"  swarm-panel / this = {base / tok_s:.2f}x" if base and name != "swarm-panel" and tok_s else ""
        p50 = statistics.median(r["latency_p50"] or 0 for r in runs)
        p95 = statistics.median(r["latency_p95"] or 0 for r in runs)
        cached = statistics.median(cached_share(r) for r in runs)
        ttft50 = statistics.median(r["ttft_p50"] or 0 for r in runs)
        ttft95 = statistics.median(r["ttft_p95"] or 0 for r in runs)
        print(f"{name:<{width}} median {tok_s:7.1f} tok/s  turn p50 {p50:5.1f} s  p95 {p95:5.1f} s"
              f"  TTFT p50 {1e3 * ttft50:6.0f} ms  p95 {1e3 * ttft95:6.0f} ms  cached {cached:4.0%}"
              f"{follow_ups(runs[-1])}{ratio}")
        each = ", ".join(f"{r['tok_s']:.1f}" for r in runs)
        served = ", ".join(str(r["requests"]) for r in runs)
        print(f"{'':<{width}} rounds {each} tok/s, {served} requests")
        if args.long_prompt_tokens:
            ttft = statistics.median(r["short_prompts"]["ttft_p95"] or 0 for r in runs)
            turn = statistics.median(r["short_prompts"]["latency_p95"] or 0 for r in runs)
            print(f"{'':<{width}} beside the long prompt: TTFT p95 {1e3 * ttft:6.0f} ms  turn p95 {turn:5.1f} s")
    if args.json:
        print(json.dumps({"median_tok_s": summary, "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
