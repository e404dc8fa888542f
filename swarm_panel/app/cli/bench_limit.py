"""`swarm-panel bench --limit`: our engine against llama.cpp's llama-batched-bench, decode only.

llama-batched-bench is a C loop of llama_decode at fixed batch sizes: B sequences prefill a prompt of
`--limit-prompt` tokens, then decode `--limit-tokens` steps of B rows each, computing every row's logits and
sampling nothing. Its text-generation rate at B is the limit of a build, a model and a device: no server on
the same kernels beats it. Ours here is the whole engine loop in this process (scheduler, batch, sampling,
outputs), B requests of the same prompt length, timed from the first step with every lane decoding to the
last. Both run split KV (a stream per sequence, batched-bench's default) in a context of B x (prompt +
tokens), the same threads, attention kernel and extra buffer types; rounds alternate, and the medians are
printed with their ratio and where our steps' time went (runtime.serving.metrics.StepAccount).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import time
from copy import copy
from pathlib import Path

from swarm_panel.app.cli.workload_flags import int_list
from swarm_panel.app.service.engine_factory import engine_for
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.serving.metrics import PARTS

log = logging.getLogger(__name__)

# llama.cpp's logger writes from a thread of its own, and a process that ends at once has been seen
# (rarely, on a loaded machine) to exit 0 before the result line was out.
BATCHED_BENCH_TRIES = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the limit beside us (--limit)")
    g.add_argument("--limit", action="store_true",
                   help="decode only, our engine in-process against llama-batched-bench at the same lanes, context, "
                        "model, threads and attention kernel; prints each one's tok/s and the ratio")
    g.add_argument("--batched-bench", type=Path, default=None, metavar="PATH",
                   help="llama-batched-bench, built from the same llama.cpp tree (benchmarks/build_llama_server.sh "
                        "builds it beside llama-server)")
    g.add_argument("--limit-widths", type=int_list, default=(8, 16, 32), metavar="B,B,...",
                   help="lanes (batch sizes) to measure")
    g.add_argument("--limit-prompt", type=int, default=128, help="prompt tokens each sequence prefills first")
    g.add_argument("--limit-tokens", type=int, default=128, help="decode steps measured")
    g.add_argument("--limit-rounds", type=int, default=3, help="rounds, each running both at every width in turn")


def run(args: argparse.Namespace) -> int:
    if args.engine != "llama":
        raise ValueError("--limit needs --engine llama: the limit is llama.cpp's own loop on the same model")
    if args.batched_bench is None or not args.batched_bench.is_file():
        raise ValueError("--limit needs --batched-bench PATH: benchmarks/build_llama_server.sh builds "
                         "llama-batched-bench beside llama-server")
    rows: dict[int, dict[str, list]] = {b: {"peer": [], "ours": [], "times": []} for b in args.limit_widths}
    setup: dict[str, object] = {}
    for round_ in range(args.limit_rounds):
        for width in args.limit_widths:
            first = round_ % 2 == 0
            for side in (("ours", "peer") if first else ("peer", "ours")):
                if side == "ours":
                    tok_s, times, setup = ours(args, width)
                    rows[width]["ours"].append(tok_s)
                    rows[width]["times"].append(times)
                else:
                    rows[width]["peer"].append(batched_bench(args, width, setup))
    out = []
    for width, r in rows.items():
        peer, mine = statistics.median(r["peer"]), statistics.median(r["ours"])
        times = r["times"][len(r["times"]) // 2]
        out.append({"lanes": width, "batched_bench_tok_s": peer, "ours_tok_s": mine, "ratio": mine / peer,
                    "rounds_batched_bench": r["peer"], "rounds_ours": r["ours"], "step_times": times})
    if args.json:
        print(json.dumps({"limit": out, "setup": setup}))
        return 0
    print(f"decode only: {args.limit_prompt}-token prompts, then {args.limit_tokens} steps; split KV; "
          f"threads {setup.get('n_threads')}, flash attention {setup.get('flash_attn')}, backend sampling "
          f"{setup.get('backend_sampling')}; medians of {args.limit_rounds} alternating rounds")
    print(f"{'lanes':>6}{'batched-bench':>15}{'ours':>10}{'ratio':>8}   our steps: "
          + " ".join(f"{p:>8}" for p in PARTS[:-1]))
    for row in out:
        t = row["step_times"]
        busy = sum(t[f"{p}_s"] for p in PARTS[:-1]) or 1.0
        print(f"{row['lanes']:>6}{row['batched_bench_tok_s']:>15.1f}{row['ours_tok_s']:>10.1f}{row['ratio']:>8.3f}"
              f"              " + " ".join(f"{t[f'{p}_s'] / busy:>8.1%}" for p in PARTS[:-1]))
    print("tok/s: decode tokens a second; batched-bench computes each row's logits and samples none, ours samples "
          "each row (greedy) and runs the whole engine loop")
    return 0


def ours(args: argparse.Namespace, width: int) -> tuple[float, dict, dict]:
    """Our decode tok/s at `width` lanes, the steps' account, and the engine's set-up for the peer to copy."""
    options = copy(args)
    options.n_ctx = width * (args.limit_prompt + args.limit_tokens)
    options.kv_unified = False
    options.prefix_cache = False
    # A fixed count both sides run with: with none asked for, a CPU run's threads would follow other
    # processes' load (runtime.llama.cpu_tuning.followers.ThreadGovernor) mid-run.
    options.threads = args.threads or len(os.sched_getaffinity(0))
    engine = engine_for(options, realtime=False, max_lanes=width)
    try:
        loop = EngineCore(Scheduler.for_engine(SchedulerConfig(policy="continuous", num_lanes=width,
                                                               prefill_chunk=args.limit_prompt * width,
                                                               prefix_cache=False), engine),
                          engine, RealClock())
        prompt = [engine.vocab.bos if engine.vocab.bos >= 0 else 1] + [
            5 + i % 200 for i in range(args.limit_prompt - 1)]
        sampling = SamplingParams(max_tokens=args.limit_tokens + 1, temperature=0.0, ignore_eos=True,
                                  repeat_penalty=1.0)
        for _ in range(width):
            loop.scheduler.add(Request(list(prompt), sampling), loop.clock.now())
        # Until every lane has its first token: the prompts are not what is measured.
        while any(not lane.request.num_output_tokens for lane in loop.scheduler.lanes.live()) or \
                loop.scheduler.waiting:
            loop.step()
        before = loop.account.totals()
        produced = 0
        started = time.perf_counter()
        while loop.scheduler.has_work:
            stats = loop.step()
            if stats is not None:
                produced += stats.useful_tokens
        elapsed = time.perf_counter() - started
        times = loop.account.totals().minus(before).as_dict()
        facts = engine.facts
        setup = {"n_threads": engine.n_threads, "flash_attn": facts.flash_attn,
                 "backend_sampling": facts.backend_sampling, "n_gpu_layers": facts.n_gpu_layers,
                 "extra_buffers": facts.extra_buffers, "model": str(engine.path)}
    finally:
        engine.close()
    return produced / elapsed, times, setup


def batched_bench(args: argparse.Namespace, width: int, setup: dict) -> float:
    """llama-batched-bench's text-generation tok/s (S_TG) at `width` sequences, in a context like ours."""
    command = [str(args.batched_bench), "-m", str(setup["model"]),
               "-c", str(width * (args.limit_prompt + args.limit_tokens)), "-b", "2048", "-ub", "512",
               "-npp", str(args.limit_prompt), "-ntg", str(args.limit_tokens), "-npl", str(width),
               "-t", str(setup["n_threads"]), "-tb", str(setup["n_threads"]),
               "-fa", "on" if setup["flash_attn"] == "on" else "off",
               "-ngl", str(999 if setup["n_gpu_layers"] else 0), "--output-format", "jsonl",
               # llama.cpp's extra buffer types (repacked weights, AMX) as ours: they crash on some CPUs.
               "--repack" if setup["extra_buffers"] else "--no-repack"]
    # A libstdc++ preloaded for llama_cpp's sake (benchmarks/gpu_check.sh) leaves this C++ program silent.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for _ in range(BATCHED_BENCH_TRIES):
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1800, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"llama-batched-bench failed ({done.returncode}): {done.stderr[-400:]}")
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if results:
            return float(results[-1]["speed_tg"])
        log.warning("llama-batched-bench exited without its result line; running it again")
    raise RuntimeError(f"llama-batched-bench printed no result: {done.stdout[-400:]} {done.stderr[-800:]}")
