"""The llama engine's per-step host work: the batch layout, row checks, and position checks that
trust what the engine fed instead of asking llama.cpp every step."""

from __future__ import annotations

import llama_cpp
import pytest

from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind, Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.context import TokenBatch
from swarm_panel.runtime.llama.engine import LlamaEngine


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def seen_by_llama(batch: TokenBatch) -> list[tuple[int, int, int, int, int]]:
    """(token, position, n_seq_id, seq_id, logits) per token, read through the llama_batch's pointers."""
    b = batch.batch
    return [(b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i]) for i in range(b.n_tokens)]


def test_a_mixed_step_lays_out_each_row_at_its_positions_and_sequence():
    batch = TokenBatch(16)
    # Sequence 3 prefills 3 tokens from 5; sequence 0 decodes at 9; sequence 1 prefills 2 from 0.
    batch.fill([10, 11, 12, 20, 30, 31], [3, 1, 2], [5, 9, 0], [3, 0, 1], [3, 4, 6], [2, 5])
    assert seen_by_llama(batch) == [
        (10, 5, 1, 3, 0), (11, 6, 1, 3, 0), (12, 7, 1, 3, 1),
        (20, 9, 1, 0, 0),
        (30, 0, 1, 1, 0), (31, 1, 1, 1, 1),
    ]
    # A decode step after it: one token a row, and no logits flag left over from the step before.
    batch.fill([40, 41, 42], [1, 1, 1], [8, 10, 2], [3, 0, 1], [1, 2, 3], [0, 2])
    assert seen_by_llama(batch) == [(40, 8, 1, 3, 1), (41, 10, 1, 0, 0), (42, 2, 1, 1, 1)]


def test_a_batch_larger_than_its_slots_is_refused():
    with pytest.raises(ValueError, match="exceeds"):
        TokenBatch(2).fill([1, 2, 3], [3], [0], [0], [3], [2])


@pytest.fixture(scope="module")
def engine(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024, n_batch=128) as eng:
        yield eng


@pytest.fixture
def pos_max_calls(monkeypatch):
    calls: list[int] = []
    real = llama_cpp.llama_memory_seq_pos_max

    def counting(mem, seq_id):
        calls.append(seq_id)
        return real(mem, seq_id)

    monkeypatch.setattr(llama_cpp, "llama_memory_seq_pos_max", counting)
    return calls


def decode_row(request: Request) -> Row:
    return Row(request, RowKind.DECODE, request.num_tokens - 1, [request.token_ids[-1]], True)


def test_decode_steps_check_positions_without_asking_llama_cpp(engine, pos_max_calls):
    requests = [Request(engine.tokenizer.tokenize(p), greedy(8)) for p in ("hello world", "what is this", "how are you")]
    result = engine.step(StepPlan(rows=[Row(r, RowKind.PREFILL, 0, list(r.token_ids), True) for r in requests]))
    for r in requests:
        r.token_ids.append(result.samples[r.request_id].token)
    pos_max_calls.clear()
    for _ in range(5):
        result = engine.step(StepPlan(rows=[decode_row(r) for r in requests]))
        assert not result.errors
        for r in requests:
            r.token_ids.append(result.samples[r.request_id].token)
    assert pos_max_calls == []
    # The record it checks against is llama.cpp's own.
    assert engine._context.memory.mismatches() == {}
    pos_max_calls.clear()
    # A row that does not continue its sequence is still caught from that record.
    stale = Row(requests[0], RowKind.DECODE, requests[0].num_tokens - 2, [requests[0].token_ids[-2]], True)
    result = engine.step(StepPlan(rows=[stale, decode_row(requests[1])]))
    assert "KV cache holds" in result.errors[requests[0].request_id]
    assert set(result.samples) == {requests[1].request_id}
    assert pos_max_calls == []
    engine.step(StepPlan(release=requests))


def test_after_a_prefix_copy_the_destination_is_checked_against_llama_cpp(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=512, n_batch=64) as eng:
        source = Request(eng.tokenizer.tokenize("the agent can call a tool"), greedy(4))
        eng.step(StepPlan(rows=[Row(source, RowKind.PREFILL, 0, list(source.token_ids), True)]))
        dest = Request(list(source.token_ids), greedy(4))
        copy = PrefixOp(PrefixOpKind.COPY, source, dest, 5)
        # The copy gave dest 5 tokens: a row from 4 is refused, one from 5 runs.
        result = eng.step(StepPlan(rows=[Row(dest, RowKind.PREFILL, 4, dest.token_ids[4:], True)], prefix_ops=[copy]))
        assert "holds 5 tokens" in result.errors[dest.request_id]
        result = eng.step(StepPlan(rows=[Row(dest, RowKind.PREFILL, 5, dest.token_ids[5:], True)]))
        assert dest.request_id in result.samples and not result.errors
        assert eng._context.memory.mismatches() == {}
        eng.step(StepPlan(release=[source, dest]))


def test_each_malformed_row_fails_only_its_own_request(engine):
    n_vocab = engine.vocab.n_tokens
    good = Request(engine.tokenizer.tokenize("hello world"), greedy(2))
    out_of_vocab = Request([1, n_vocab], greedy(2))
    negative = Request([1, -1], greedy(2))
    empty = Request([1, 2], greedy(2))
    too_long = Request([1, 2], greedy(2))
    twice = Request([1, 2], greedy(2))
    rows = [Row(good, RowKind.PREFILL, 0, list(good.token_ids), True),
            Row(out_of_vocab, RowKind.PREFILL, 0, list(out_of_vocab.token_ids), True),
            Row(negative, RowKind.PREFILL, 0, list(negative.token_ids), True),
            Row(empty, RowKind.PREFILL, 0, [], True),
            Row(too_long, RowKind.PREFILL, engine.max_context - 1, [1, 2], True),
            Row(twice, RowKind.PREFILL, 0, [1], False),
            Row(twice, RowKind.PREFILL, 1, [2], True)]
    result = engine.step(StepPlan(rows=rows))
    assert set(result.samples) == {good.request_id}
    assert f"within 0..{n_vocab - 1}" in result.errors[out_of_vocab.request_id]
    assert f"within 0..{n_vocab - 1}" in result.errors[negative.request_id]
    assert "at least one token" in result.errors[empty.request_id]
    assert "exceed the context" in result.errors[too_long.request_id]
    assert "two rows" in result.errors[twice.request_id]
    assert engine._context.memory.mismatches() == {}
    engine.step(StepPlan(release=[good, out_of_vocab, negative, empty, too_long, twice]))
