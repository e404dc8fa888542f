"""A split-KV decode step of rows whose contexts differ: one llama_decode call, or as the engine cuts it.

    PYTHONPATH=. python benchmarks/mixed_contexts.py [--model demo|smollm2|GGUF] [--short 200] [--long 2000] [--long-id 3]

7 sequences of --short tokens and one of --long (sequence id --long-id) decode together. The
engine first fits its call line on its own steps (swarm_panel.runtime.llama.cpu_tuning.followers, probing as it does in
serving); then, from the asked contexts again, rounds time --steps decode steps with its cut and as
many with every step one call (what llama.cpp does with the batch as given), alternating which goes
first. Medians per step.
"""

from __future__ import annotations

import argparse
import statistics
import time

from swarm_panel.app.service.engine_factory import resolve_model
from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.followers import CallCost
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import ensure_demo_model

LANES = 8


class NeverCut(CallCost):
    def for_step(self) -> None:
        return None


LONG_ID = 3
N_BATCH = 512


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo", help="demo, smollm2 (the bundled model) or a GGUF path")
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--long", type=int, default=2000)
    parser.add_argument("--long-id", type=int, default=LONG_ID,
                        help="sequence id of the long one: mid-batch costs two more ubatches apart, the last id one")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=400, help="most steps to wait for the engine's fit")
    args = parser.parse_args()
    model = ensure_demo_model() if args.model == "demo" else resolve_model(None if args.model == "smollm2" else args.model)[0]
    n_ctx = LANES * (args.long + args.rounds * (2 * args.steps + args.warmup_steps) + 512)
    with LlamaEngine(model, max_lanes=LANES, n_ctx=n_ctx, n_batch=N_BATCH, kv_unified=False) as engine:
        vocab = engine.vocab
        lengths = [args.long if k == args.long_id else args.short for k in range(LANES)]
        requests = [Request([vocab.bos] + [16 + (i * 7 + k * 13) % (vocab.n_tokens - 16) for i in range(n - 1)],
                            SamplingParams(max_tokens=1 << 20)) for k, n in enumerate(lengths)]
        position: dict[int, int] = {}

        def prefill() -> None:
            engine.step(StepPlan(release=requests))
            for request in requests:
                for start in range(0, len(request.token_ids), N_BATCH):
                    engine.step(StepPlan(rows=[Row(request, RowKind.PREFILL, start,
                                                   request.token_ids[start:start + N_BATCH], False)]))
                position[request.request_id] = len(request.token_ids)

        def step() -> float:
            started = time.perf_counter()
            engine.step(StepPlan(rows=[Row(r, RowKind.DECODE, position[r.request_id], [vocab.bos + 16], True)
                                       for r in requests]))
            for r in requests:
                position[r.request_id] += 1
            return time.perf_counter() - started

        prefill()
        fitted = engine.call_cost
        for warmup in range(args.warmup_steps):
            if fitted.coefficients is not None:
                break
            step()
        print(f"fit after {warmup} steps: {fitted.coefficients}")
        # Back to the asked contexts: the warm-up grew them.
        prefill()
        one_call: list[float] = []
        cut: list[float] = []
        for round_index in range(args.rounds):
            for mode in (("cut", "one") if round_index % 2 == 0 else ("one", "cut")):
                if mode == "one":
                    engine._context.call_cost = NeverCut(max_saving_cells=0)
                    one_call += [step() for _ in range(args.steps)]
                    engine._context.call_cost = fitted
                    continue
                before = engine.split_steps
                cut += [step() for _ in range(args.steps)]
                print(f"round {round_index + 1}: {engine.split_steps - before} of {args.steps} steps cut; "
                      f"fit {fitted.coefficients}")
    print(f"model {model.name}: 7 rows at {args.short} tokens of context, 1 at {args.long} "
          f"(sequence id {args.long_id}), split KV")
    print(f"one call a step      {1e3 * statistics.median(one_call):7.1f} ms")
    print(f"the engine's cut     {1e3 * statistics.median(cut):7.1f} ms"
          f"   ({statistics.median(one_call) / statistics.median(cut):.2f}x)")


if __name__ == "__main__":
    main()
