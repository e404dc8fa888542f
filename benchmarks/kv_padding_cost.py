"""What llama.cpp's padded attention costs: 8-lane decode steps just below and just above 256 cells.

llama.cpp sizes a step's attention to the longest stream in it, rounded up to a multiple of 256
cells (`llama_kv_cache::get_n_kv`), and without flash attention it computes every one of those
cells, masked or not. So the step crossing from 256 to 257 tokens of context pays for 256 more
cells on every lane, while each lane's real context grew by one token. Rounds alternate nothing:
each round prefills 8 sequences to --below tokens and decodes 32 steps across the boundary.

    PYTHONPATH=. python benchmarks/kv_padding_cost.py [--model GGUF] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics

from attention_cost import LANES, N_BATCH, prefill, timed

from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import ensure_demo_model

BOUNDARY = 256
SPAN = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="GGUF (default: the demo model)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    model = args.model or ensure_demo_model()
    below: list[float] = []
    above: list[float] = []
    start = BOUNDARY - SPAN
    with LlamaEngine(model, max_lanes=LANES, n_ctx=32768, n_batch=N_BATCH, kv_unified=False,
                     flash_attn="off", n_threads=args.threads) as engine:
        vocab = engine.vocab
        for r in range(args.rounds):
            requests = [Request([vocab.bos] + [16 + (i * 7 + k * 13 + r) % (vocab.n_tokens - 16) for i in range(start - 1)],
                                SamplingParams(max_tokens=1 << 16)) for k in range(LANES)]
            for request in requests:
                prefill(engine, request, start)
            for pos in range(start, BOUNDARY + SPAN):
                step = timed(engine, StepPlan(rows=[Row(q, RowKind.DECODE, pos, [vocab.bos + 16], True)
                                                    for q in requests]))
                (below if pos < BOUNDARY else above).append(step)
            engine.step(StepPlan(release=requests))
            print(f"round {r + 1}: contexts {start + 1}-{BOUNDARY} {1e3 * statistics.median(below[-SPAN:]):6.1f} ms, "
                  f"{BOUNDARY + 1}-{BOUNDARY + SPAN} {1e3 * statistics.median(above[-SPAN:]):6.1f} ms", flush=True)
    low, high = statistics.median(below), statistics.median(above)
    print(f"{LANES} lanes, median step: {1e3 * low:.1f} ms at {BOUNDARY} cells, {1e3 * high:.1f} ms at "
          f"{2 * BOUNDARY} cells ({high / low:.2f}x) for {SPAN} more tokens of real context at most")


if __name__ == "__main__":
    main()
