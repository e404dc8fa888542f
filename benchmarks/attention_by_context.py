"""Where the two attention kernels cross: a decode step of 8 lanes and a prompt chunk, with flash
attention and without, at each context given, in the layout a default `serve` holds (split KV, 8
lanes of --n-ctx / 8 cells).

swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe times one context (300 tokens); this prints the whole curve, which says
what that one point leaves out for agents whose conversations grow past it.

`--widened` prints the layout a default `serve` turns to for a coding agent's long first prompt
instead: one unified pool holding a `--long`-token sequence beside 7 lanes at each context, and the
decode step of all 8 and of the 7 short ones alone (the long one idle, its cells still in the pool).
`--long 0` holds 8 lanes at each context, as a pool unified from the start does.

    PYTHONPATH=. python benchmarks/attention_by_context.py [--model GGUF] [--contexts 150,300,700,1200,2000]
    PYTHONPATH=. python benchmarks/attention_by_context.py --widened [--long 5000] [--contexts 300,1200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import (
    LANES,
    decode_step_s,
    fill_lanes,
    prompt_chunk_s,
    timed_step,
)
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import ensure_demo_model


def measure(model: Path, flash_attn: str, context: int, n_ctx: int, steps: int, chunk: int) -> tuple[float, float]:
    """(median decode step, prompt chunk) in seconds, the lanes holding `context` tokens each."""
    with LlamaEngine(model, max_lanes=LANES, n_ctx=n_ctx, n_batch=512, kv_unified=False, cache_slots=0,
                     flash_attn=flash_attn, park_cached=False) as engine:
        lanes = fill_lanes(engine, LANES, context)
        return decode_step_s(engine, lanes, steps), prompt_chunk_s(engine, lanes[0], chunk)


def _computed(engine: LlamaEngine, tokens: int, salt: int) -> Request:
    """A sequence of `tokens` prompt tokens of its own (no cells shared with another), computed."""
    n = engine.vocab.n_tokens
    ids = [engine.vocab.bos] + [16 + (i * 7 + salt * 13) % (n - 16) for i in range(tokens - 1)]
    request = Request(list(ids), SamplingParams(max_tokens=1 << 10))
    for start in range(0, tokens, 512):
        chunk = ids[start:start + 512]
        timed_step(engine, StepPlan(rows=[Row(request, RowKind.PREFILL, start, chunk, start + 512 >= tokens)]))
    return request


def measure_widened(model: Path, flash_attn: str, long: int, context: int, n_ctx: int,
                    steps: int) -> tuple[float, float]:
    """(decode step of all 8 lanes, of the 7 short ones alone) in seconds, in one unified pool."""
    with LlamaEngine(model, max_lanes=LANES, n_ctx=n_ctx, n_batch=512, kv_unified=True, cache_slots=0,
                     flash_attn=flash_attn, park_cached=False) as engine:
        lanes = [_computed(engine, long or context, 0)] + [_computed(engine, context, k) for k in range(1, LANES)]
        return decode_step_s(engine, lanes, steps), decode_step_s(engine, lanes[1:], steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the demo model)")
    parser.add_argument("--contexts", default=None, help="default: 150,300,700,1200,2000 (--widened: 300,1200)")
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of them is shown")
    parser.add_argument("--widened", action="store_true", help="one unified pool with a long sequence in it")
    parser.add_argument("--long", type=int, default=5000,
                        help="--widened: the long sequence's tokens (0: all 8 lanes at each context)")
    args = parser.parse_args()
    model = args.model or ensure_demo_model()
    contexts = [int(c) for c in (args.contexts or ("300,1200" if args.widened else "150,300,700,1200,2000")).split(",")]
    if args.widened:
        held = f"one sequence of {args.long} tokens and {LANES - 1}" if args.long else f"{LANES}"
        print(f"{model.name}: unified KV of {args.n_ctx} cells, {held} lanes at each context (each its own tokens); "
              f"decode step of all {LANES} and of the last {LANES - 1}, best of {args.rounds} alternating rounds")
        print(f"{'context':>8}  {'8 on':>9}  {'8 off':>9}  {'7 on':>9}  {'7 off':>9}")
    else:
        print(f"{model.name}: split KV, {LANES} lanes of {args.n_ctx // LANES}; decode step of {LANES} lanes and a "
              f"{args.chunk}-token prompt chunk, best of {args.rounds} alternating rounds")
        print(f"{'context':>8}  {'decode on':>10}  {'decode off':>10}  {'chunk on':>9}  {'chunk off':>9}  faster decode")
    for context in contexts:
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for setting in ("off", "on"):
                if args.widened:
                    first, second = measure_widened(model, setting, args.long, context, args.n_ctx, args.steps)
                else:
                    first, second = measure(model, setting, context, args.n_ctx, args.steps, args.chunk)
                old = best.get(setting, (float("inf"), float("inf")))
                best[setting] = (min(old[0], first), min(old[1], second))
        (on_1, on_2), (off_1, off_2) = best["on"], best["off"]
        if args.widened:
            print(f"{context:>8}  {1e3 * on_1:>7.1f}ms  {1e3 * off_1:>7.1f}ms  {1e3 * on_2:>7.1f}ms  {1e3 * off_2:>7.1f}ms",
                  flush=True)
            continue
        winner = "flash attention" if on_1 < off_1 else "plain path"
        print(f"{context:>8}  {1e3 * on_1:>8.1f}ms  {1e3 * off_1:>8.1f}ms  {1e3 * on_2:>7.0f}ms  {1e3 * off_2:>7.0f}ms"
              f"  {winner} ({max(on_1, off_1) / min(on_1, off_1):.2f}x)", flush=True)


if __name__ == "__main__":
    main()
