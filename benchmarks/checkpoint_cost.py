"""What one recurrent-state checkpoint costs on a hybrid model: its size, and the time to take and restore it.

    python benchmarks/checkpoint_cost.py MODEL.gguf [--context 400] [--repeat 200]
"""

from __future__ import annotations

import argparse
import time

from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--context", type=int, default=400, help="tokens the sequence holds")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with LlamaEngine(args.model, max_lanes=2, n_ctx=4 * args.context, n_batch=args.context + 1) as engine:
        if engine.checkpoints is None:
            raise SystemExit(f"{args.model} is an attention model: it needs no checkpoints")
        n = args.context
        request = Request([engine.vocab.bos] + [300 + i % 50 for i in range(n)], SamplingParams(max_tokens=1))
        engine.step(StepPlan(rows=[Row(request, RowKind.PREFILL, 0, request.token_ids[:n], False)]))
        seq_id, prefix = engine._sequences.lanes[request.request_id].seq_id, request.token_ids[:n]
        memory = engine._context.memory
        started = time.perf_counter()
        for _ in range(args.repeat):
            engine.checkpoints.clear()
            memory.snapshot(seq_id, prefix)
        take = (time.perf_counter() - started) / args.repeat
        started = time.perf_counter()
        for _ in range(args.repeat):
            memory._restore(seq_id, prefix, n)
        restore = (time.perf_counter() - started) / args.repeat
        engine.step(StepPlan(release=[request]))
    print(f"one checkpoint: {memory.state_bytes:,} bytes; take {take * 1e6:.0f} us, restore {restore * 1e6:.0f} us")


if __name__ == "__main__":
    main()
