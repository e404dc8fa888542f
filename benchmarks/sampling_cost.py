"""What choosing one row's token costs: llama.cpp's sampler chain against swarm_panel.runtime.llama.greedy_sampler.

    PYTHONPATH=. python benchmarks/sampling_cost.py [--model smollm2|demo|PATH] [--rounds 5] [--samples 500]

One decode of a short prompt, then the same row's logits sampled again and again under plain greedy,
greedy with a repeat penalty, and greedy with a penalty and a logit bias, by the chain
(`llama_sampler_sample`) and by the numpy sampler in alternating rounds; prints the median per
sample of each and checks both picked the same tokens. The bundled SmolLM2 has a 49k vocabulary,
which the chain walks once per row; below swarm_panel.runtime.llama.greedy_sampler.MIN_VOCAB the engine keeps the chain.
"""

from __future__ import annotations

import argparse
import statistics
import time

from swarm_panel.app.service.engine_factory import resolve_model
from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.greedy_sampler import GreedySampler
from swarm_panel.runtime.llama.sampling import ChainSampler, build_sampler_chain, logit_bias

CASES = {
    "greedy": SamplingParams(temperature=0.0),
    "greedy, repeat penalty 1.1": SamplingParams(temperature=0.0, repeat_penalty=1.1),
    "greedy, penalty and a logit bias": SamplingParams(temperature=0.0, repeat_penalty=1.1, logit_bias={2: -100.0}),
}


def per_sample_ms(make, ctx, index: int, samples: int) -> tuple[float, list[int]]:
    sampler = make()
    tokens = []
    started = time.perf_counter()
    for _ in range(samples):
        tokens.append(sampler.sample(ctx, index))
    elapsed = time.perf_counter() - started
    sampler.close()
    return elapsed / samples * 1e3, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2 (bundled), demo, or a GGUF path")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    with LlamaEngine(resolve_model(args.model)[0], max_lanes=1, n_ctx=512) as engine:
        prompt = engine.tokenize("def add(a, b):\n    return")
        request = Request(prompt, SamplingParams(max_tokens=1, temperature=0.0))
        engine.step(StepPlan(rows=[Row(request, RowKind.PREFILL, 0, prompt, True)]))
        ctx, n_vocab, eog = engine._ctx, engine.vocab.n_tokens, tuple(engine.vocab.eog_tokens)
        # The prompt's last position is the row with logits.
        row = len(prompt) - 1
        print(f"model {engine.name}, vocabulary {n_vocab} tokens, {args.samples} samples a round, "
              f"{args.rounds} alternating rounds, medians")
        for name, sampling in CASES.items():
            chain_ms, ours_ms = [], []
            for _ in range(args.rounds):
                ms, chain_tokens = per_sample_ms(
                    lambda: ChainSampler(build_sampler_chain(sampling, n_vocab, eog, prompt)), ctx, row, args.samples)
                chain_ms.append(ms)
                ms, our_tokens = per_sample_ms(
                    lambda: GreedySampler(n_vocab, logit_bias(sampling, n_vocab, eog), sampling.repeat_penalty, prompt),
                    ctx, row, args.samples)
                ours_ms.append(ms)
                if chain_tokens != our_tokens:
                    raise SystemExit(f"{name}: the samplers disagree")
            chain, ours = statistics.median(chain_ms), statistics.median(ours_ms)
            print(f"{name:<34} chain {chain:.3f} ms   numpy {ours:.3f} ms   {chain / ours:.1f}x")
        engine.step(StepPlan(release=[request]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
