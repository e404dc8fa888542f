"""The llama engine's own Python cost per step, apart from llama.cpp's compute and from sampling.

    PYTHONPATH=. python benchmarks/step_profile.py [--model tiny|smollm2|PATH] [--lanes 64] [--steps 200]
    PYTHONPATH=. python benchmarks/step_profile.py --against /work/before --rounds 5
    PYTHONPATH=. python benchmarks/step_profile.py --profile

One engine, `--lanes` requests of 16-token prompts prefilled together, then `--steps` decode steps
of every lane at once, then `--chunks` 512-token prefill chunks of one long prompt. Each step's
wall time inside `LlamaEngine.step` is split into llama_decode, sampling (`_sample`) and the rest
(host_ms; host_cpu_ms is the same part in this thread's CPU time, which a busy machine disturbs less):
the host work of building the batch and checking rows, which should grow with rows, not tokens.

`--against DIR` alternates runs of this checkout and of DIR (another checkout, e.g. a worktree of
the base commit) in fresh processes and prints the median of each: the machine may be shared and
noisy, and alternating keeps drift from favouring either side. `--profile` prints cProfile's top
functions over the decode steps (sampling and llama_decode included, for scale).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT_TOKENS = 16


def build_engine(model: str, lanes: int, steps: int, chunks: int, chunk: int):
    from swarm_panel.app.service.engine_factory import resolve_model
    from swarm_panel.runtime.llama.engine import LlamaEngine
    from swarm_panel.runtime.models.demo import write_demo_model

    if model == "tiny":
        path = write_demo_model(Path(tempfile.mkdtemp()) / "tiny.gguf", "tiny")
    else:
        path, _ = resolve_model(model, 0)
    n_ctx = lanes * (PROMPT_TOKENS + steps + 8) + chunks * chunk + 256
    return LlamaEngine(path, max_lanes=lanes, n_ctx=n_ctx, n_batch=chunk)


def measure(args: argparse.Namespace) -> dict[str, float]:
    import llama_cpp

    from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
    from swarm_panel.runtime.core.request import Request, SamplingParams

    engine = build_engine(args.model, args.lanes, args.steps, args.chunks, args.chunk)
    # Wall time inside step() and, steadier on a shared machine, this thread's CPU time (llama_decode's
    # calling thread computes too, so its share is taken out like the wall time's).
    decode_s = sample_s = decode_cpu = sample_cpu = 0.0
    real_decode, real_sample = llama_cpp.llama_decode, engine._sample

    def timed_decode(ctx, batch):
        nonlocal decode_s, decode_cpu
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real_decode(ctx, batch)
        finally:
            decode_s += time.perf_counter() - t
            decode_cpu += time.thread_time() - c

    def timed_sample(request, index):
        nonlocal sample_s, sample_cpu
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real_sample(request, index)
        finally:
            sample_s += time.perf_counter() - t
            sample_cpu += time.thread_time() - c

    llama_cpp.llama_decode = timed_decode
    engine._sample = timed_sample
    samples: dict[str, list[tuple[float, float, float, float]]] = {"decode": [], "prefill": []}

    def step(plan: StepPlan, kind: str | None):
        nonlocal decode_s, sample_s, decode_cpu, sample_cpu
        decode_s = sample_s = decode_cpu = sample_cpu = 0.0
        cpu = time.thread_time()
        result = engine.step(plan)
        cpu = time.thread_time() - cpu
        assert not result.errors, result.errors
        if kind:
            samples[kind].append((result.duration_s, decode_s, sample_s, cpu - decode_cpu - sample_cpu))
        return result

    vocab = engine.vocab.n_tokens
    greedy = SamplingParams(max_tokens=args.steps + 1, temperature=0.0, ignore_eos=True)
    requests = [Request([(7 * i + j) % (vocab - 1) + 1 for j in range(PROMPT_TOKENS)], greedy)
                for i in range(args.lanes)]
    per_step = max(1, args.chunk // PROMPT_TOKENS)
    for first in range(0, len(requests), per_step):
        batch = requests[first:first + per_step]
        result = step(StepPlan(rows=[Row(r, RowKind.PREFILL, 0, list(r.token_ids), True) for r in batch]), None)
        for r in batch:
            r.token_ids.append(result.samples[r.request_id].token)
    profiler = cProfile.Profile() if args.profile else None
    for i in range(args.steps):
        rows = [Row(r, RowKind.DECODE, r.num_tokens - 1, [r.token_ids[-1]], True) for r in requests]
        if profiler and i >= 5:
            profiler.enable()
        result = step(StepPlan(rows=rows), "decode" if i >= 5 else None)
        if profiler:
            profiler.disable()
        for r in requests:
            r.token_ids.append(result.samples[r.request_id].token)
    step(StepPlan(release=requests), None)
    tokens = [r.output_token_ids for r in requests]
    long = Request([(11 * j) % (vocab - 1) + 1 for j in range(args.chunks * args.chunk)], greedy)
    for c in range(args.chunks):
        start = c * args.chunk
        last = c == args.chunks - 1
        result = step(StepPlan(rows=[Row(long, RowKind.PREFILL, start, long.token_ids[start:start + args.chunk],
                                         last)]), "prefill")
    tokens.append([result.samples[long.request_id].token])
    step(StepPlan(release=[long]), None)
    engine.close()
    llama_cpp.llama_decode = real_decode
    if profiler:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    # Greedy tokens of every lane and of the long prompt: two versions of the engine must agree.
    out: dict[str, float | str] = {"tokens_sha1": hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:12]}
    for kind, rows in samples.items():
        out[f"{kind}_step_ms"] = statistics.median(t for t, _, _, _ in rows) * 1e3
        out[f"{kind}_llama_decode_ms"] = statistics.median(d for _, d, _, _ in rows) * 1e3
        out[f"{kind}_sample_ms"] = statistics.median(s for _, _, s, _ in rows) * 1e3
        out[f"{kind}_host_ms"] = statistics.median(t - d - s for t, d, s, _ in rows) * 1e3
        out[f"{kind}_host_cpu_ms"] = statistics.median(c for _, _, _, c in rows) * 1e3
    return out


def compare(args: argparse.Namespace) -> int:
    sides = {"this": ROOT, "against": Path(args.against).resolve()}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    flags = ["--model", args.model, "--lanes", str(args.lanes), "--steps", str(args.steps),
             "--chunks", str(args.chunks), "--chunk", str(args.chunk), "--json"]
    for _ in range(args.rounds):
        for side, root in sides.items():
            env = dict(os.environ, PYTHONPATH=str(root))
            done = subprocess.run([sys.executable, __file__, *flags], env=env, cwd=root, check=True,
                                  capture_output=True, text=True)
            runs[side].append(json.loads(done.stdout.splitlines()[-1]))
    digests = {r.pop("tokens_sha1") for rs in runs.values() for r in rs}
    medians = {side: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for side, rs in runs.items()}
    same = len(digests) == 1
    if args.json:
        print(json.dumps(dict(medians, same_tokens=same)))
        return 0 if same else 1
    print(f"medians of {args.rounds} alternating runs, {args.lanes} lanes, model {args.model} (ms per step)")
    print(f"{'':28}{'this':>10}{'against':>10}")
    for key in medians["this"]:
        print(f"{key:28}{medians['this'][key]:10.3f}{medians['against'][key]:10.3f}")
    print("greedy tokens: " + ("the same in every run" if same else f"DIFFER between runs: {sorted(digests)}"))
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny (random weights, written here), smollm2, or a path")
    parser.add_argument("--lanes", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--against", help="another checkout to alternate runs with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.against:
        return compare(args)
    out = measure(args)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:28}{value:>10.3f}" if isinstance(value, float) else f"{key:28}{value:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
