"""Where the two attention kernels cross: a decode step of 8 lanes and a prompt chunk, with flash
attention and without, at each context given, in the layout a default `serve` holds (split KV, 8
lanes of --n-ctx / 8 cells).

runtime.flash_attn_probe times one context (300 tokens); this prints the whole curve, which says
what that one point leaves out for agents whose conversations grow past it.

    PYTHONPATH=. python benchmarks/attention_by_context.py [--model GGUF] [--contexts 150,300,700,1200,2000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runtime.demo_model import ensure_demo_model
from runtime.flash_attn_probe import LANES, decode_step_s, fill_lanes, prompt_chunk_s
from runtime.llama_engine import LlamaEngine


def measure(model: Path, flash_attn: str, context: int, n_ctx: int, steps: int, chunk: int) -> tuple[float, float]:
    """(median decode step, prompt chunk) in seconds, the lanes holding `context` tokens each."""
    with LlamaEngine(model, max_lanes=LANES, n_ctx=n_ctx, n_batch=512, kv_unified=False, cache_slots=0,
                     flash_attn=flash_attn, park_cached=False) as engine:
        lanes = fill_lanes(engine, LANES, context)
        return decode_step_s(engine, lanes, steps), prompt_chunk_s(engine, lanes[0], chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the demo model)")
    parser.add_argument("--contexts", default="150,300,700,1200,2000")
    parser.add_argument("--n-ctx", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of them is shown")
    args = parser.parse_args()
    model = args.model or ensure_demo_model()
    print(f"{model.name}: split KV, {LANES} lanes of {args.n_ctx // LANES}; decode step of {LANES} lanes and a "
          f"{args.chunk}-token prompt chunk, best of {args.rounds} alternating rounds")
    print(f"{'context':>8}  {'decode on':>10}  {'decode off':>10}  {'chunk on':>9}  {'chunk off':>9}  faster decode")
    for context in (int(c) for c in args.contexts.split(",")):
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for setting in ("off", "on"):
                decode, chunk = measure(model, setting, context, args.n_ctx, args.steps, args.chunk)
                old = best.get(setting, (float("inf"), float("inf")))
                best[setting] = (min(old[0], decode), min(old[1], chunk))
        (on_d, on_c), (off_d, off_c) = best["on"], best["off"]
        winner = "flash attention" if on_d < off_d else "plain path"
        print(f"{context:>8}  {1e3 * on_d:>8.1f}ms  {1e3 * off_d:>8.1f}ms  {1e3 * on_c:>7.0f}ms  {1e3 * off_c:>7.0f}ms"
              f"  {winner} ({max(on_d, off_d) / min(on_d, off_d):.2f}x)", flush=True)


if __name__ == "__main__":
    main()
