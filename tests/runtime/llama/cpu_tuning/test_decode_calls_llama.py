"""A split-KV step run as several llama_decode calls computes what one call, or each sequence alone, does."""

from __future__ import annotations

import llama_cpp

from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.followers import CallCoefficients, CallCost
from swarm_panel.runtime.llama.engine import LlamaEngine

CHUNK = 96
# Any span this far past its neighbours' runs apart.
CUT_EAGERLY = CallCoefficients(ubatch_ms=1.0, row_ms=1.0, cell_ms=1.0)


def prompts(engine: LlamaEngine) -> list[list[int]]:
    n = engine.vocab.n_tokens
    lengths = (12, 17, 420, 9)
    return [[engine.vocab.bos] + [16 + (i * 31 + k * 7) % (n - 16) for i in range(length)]
            for k, length in enumerate(lengths)]


def run(engine: LlamaEngine, prompts: list[list[int]], steps: int, staggered: bool) -> list[list[int]]:
    """Greedy tokens of each prompt, all of them in one step of rows each time. `staggered`: the long
    prompt (third) is still prefilled while the others already decode, so prompt and decode rows mix."""
    requests = [Request(list(p), SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)) for p in prompts]
    fed = [0] * len(requests)
    out: list[list[int]] = [[] for _ in requests]
    while any(len(o) < steps for o in out):
        rows = []
        for k, request in enumerate(requests):
            tokens = request.token_ids
            if len(out[k]) >= steps:
                continue
            if fed[k] < len(prompts[k]):
                chunk = CHUNK if staggered or k != 2 else len(prompts[k])
                part = tokens[fed[k]:min(fed[k] + chunk, len(prompts[k]))]
                rows.append(Row(request, RowKind.PREFILL, fed[k], part, fed[k] + len(part) == len(prompts[k])))
            else:
                rows.append(Row(request, RowKind.DECODE, fed[k], [tokens[-1]], True))
        result = engine.step(StepPlan(rows=rows))
        assert not result.errors
        for row in rows:
            k = requests.index(row.request)
            fed[k] += len(row.tokens)
            if row.sample:
                out[k].append(result.samples[row.request.request_id].token)
                row.request.output_token_ids.append(out[k][-1])
    engine.step(StepPlan(release=requests))
    return out


def alone(path, prompt: list[int], steps: int) -> list[int]:
    with LlamaEngine(path, max_lanes=1, n_ctx=1024, n_batch=512, kv_unified=False) as engine:
        return run(engine, [prompt], steps, staggered=False)[0]


def test_a_step_cut_around_a_long_stream_gives_the_tokens_of_each_sequence_alone(arch_model_path, monkeypatch):
    calls_per_step: list[int] = []
    decode = llama_cpp.llama_decode

    def counting(ctx, batch):
        calls_per_step[-1] += 1
        return decode(ctx, batch)

    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=512, kv_unified=False) as engine:
        asked = prompts(engine)
        engine.call_cost.coefficients = CUT_EAGERLY
        step = engine.step

        def counted_step(plan):
            calls_per_step.append(0)
            return step(plan)

        monkeypatch.setattr(llama_cpp, "llama_decode", counting)
        monkeypatch.setattr(engine, "step", counted_step)
        cut = run(engine, asked, steps=8, staggered=True)
        assert engine.split_steps > 0
        # The long stream (id 2) runs apart from ids 0, 1 and 3, which share one call.
        assert max(calls_per_step) == 2
    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    for prompt, tokens in zip(asked, cut):
        assert tokens == alone(arch_model_path, prompt, 8)


class Recorded(CallCost):
    def __init__(self) -> None:
        super().__init__(max_saving_cells=0, probe_every=1 << 30)
        self.seen: list[tuple[int, int, int]] = []

    def observe(self, ubatches: int, rows: int, cells: int, seconds: float) -> None:
        assert seconds > 0
        self.seen.append((ubatches, rows, cells))


def test_the_fit_sees_each_decode_call_as_llama_cpp_cuts_it_and_no_call_that_carries_a_prompt(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=512, kv_unified=False) as engine:
        engine._context.call_cost = recorded = Recorded()
        # 2 steps that prefill (unseen), then 2 decode steps: 8 tokens to ids 0, 1 and 3, 420 to id 2.
        run(engine, prompts(engine), steps=3, staggered=False)
        assert recorded.seen == [(1, 4, 4 * 512), (1, 4, 4 * 512)]
        recorded.seen.clear()
        recorded.coefficients = CUT_EAGERLY
        run(engine, prompts(engine), steps=3, staggered=False)
        assert sorted(recorded.seen) == sorted([(2, 3, 3 * 256), (1, 1, 512)] * 2)


def test_a_unified_pool_is_never_cut(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=512, kv_unified=True) as engine:
        engine.call_cost.coefficients = CUT_EAGERLY
        run(engine, prompts(engine), steps=4, staggered=True)
        assert engine.split_steps == 0
