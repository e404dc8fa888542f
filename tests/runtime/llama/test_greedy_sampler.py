"""The numpy greedy sampler picks, token for token, what llama.cpp's logit_bias + penalties + greedy
chain picks: on made-up logits full of ties and signs, and in real decoding on both architectures."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest

from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama import sampling as llama_sampling
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.sampling import (
    MIN_VOCAB,
    PENALTY_LAST_N,
    ChainSampler,
    GreedySampler,
    build_sampler,
    build_sampler_chain,
    takes_greedy_sampler,
)
from tests.runtime.llama.test_llama_engine import run

VOCAB = 400


@pytest.fixture(autouse=True)
def _numpy_at_any_vocabulary(monkeypatch):
    """These vocabularies are small, where build_sampler would keep the chain; the tokens are the question here."""
    monkeypatch.setattr(llama_sampling, "MIN_VOCAB", 0)


def chain_choice(chain, logits: np.ndarray) -> int:
    """What llama_sampler_sample does with these logits: apply the chain, take its pick, accept it."""
    data = (llama_cpp.llama_token_data * len(logits))(
        *(llama_cpp.llama_token_data(i, float(v), 0.0) for i, v in enumerate(logits)))
    array = llama_cpp.llama_token_data_array(data, len(logits), -1, False)
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
    token = data[array.selected].id
    llama_cpp.llama_sampler_accept(chain, token)
    return token


@pytest.mark.parametrize("seed", range(24))
def test_picks_what_llama_cpp_chain_picks(seed):
    rng = np.random.default_rng(seed)
    # Few distinct values, so ties, zeros and both signs are everywhere; few hot tokens, so the
    # window keeps repeating the leaders and the penalty keeps changing who leads.
    hot = rng.choice(VOCAB, size=12, replace=False)
    bias = {int(t): float(v) for t, v in zip(rng.choice(VOCAB, size=int(rng.integers(0, 6)), replace=False),
                                                 rng.choice([-100.0, -1.5, 0.5, 3.0, float("-inf")], size=6))}
    penalty = float(rng.choice([1.0, 1.1, 1.3, 0.8, 2.0, 0.0]))
    sampling = SamplingParams(temperature=0.0, repeat_penalty=penalty, logit_bias=bias,
                              ignore_eos=bool(rng.integers(2)))
    history = [int(t) for t in rng.choice(hot, size=int(rng.integers(0, 2 * PENALTY_LAST_N)))]
    eog = [int(hot[0])]
    ours = build_sampler(sampling, VOCAB, eog, history)
    assert isinstance(ours, GreedySampler)
    chain = build_sampler_chain(sampling, VOCAB, eog, history)
    try:
        for _ in range(150):
            logits = (rng.integers(-4, 5, size=VOCAB) / 2).astype(np.float32)
            logits[hot] += rng.integers(0, 4, size=len(hot)).astype(np.float32)
            # Every other row all below zero, where the penalty multiplies instead of dividing.
            logits -= np.float32(6 * rng.integers(2))
            assert ours.choose(logits.copy()) == chain_choice(chain, logits)
    finally:
        llama_cpp.llama_sampler_free(chain)


def test_only_plain_greedy_over_a_large_vocabulary_leaves_the_chain(monkeypatch):
    plain = SamplingParams(temperature=0.0, repeat_penalty=1.3, logit_bias={1: 2.0})
    monkeypatch.setattr(llama_sampling, "MIN_VOCAB", MIN_VOCAB)
    assert takes_greedy_sampler(plain, MIN_VOCAB)
    assert not takes_greedy_sampler(plain, MIN_VOCAB - 1)
    small = build_sampler(plain, VOCAB, ())
    assert isinstance(small, ChainSampler)
    small.close()
    monkeypatch.setattr(llama_sampling, "MIN_VOCAB", 0)
    for other in (SamplingParams(temperature=0.7), SamplingParams(temperature=0.0, frequency_penalty=0.5),
                  SamplingParams(temperature=0.0, presence_penalty=0.5),
                  SamplingParams(temperature=0.0, grammar='root ::= "a"')):
        sampler = build_sampler(other, VOCAB, ())
        assert isinstance(sampler, ChainSampler)
        sampler.close()


def test_a_bias_outside_the_vocabulary_is_refused_on_either_path():
    for sampling in (SamplingParams(temperature=0.0, logit_bias={VOCAB: 1.0}),
                     SamplingParams(temperature=0.7, logit_bias={VOCAB: 1.0})):
        with pytest.raises(ValueError, match="outside the vocabulary"):
            build_sampler(sampling, VOCAB, ())


def test_decoding_with_it_gives_the_chain_s_tokens(arch_model_path, monkeypatch):
    same_tokens_either_way(arch_model_path, monkeypatch)


def test_the_bundled_model_decodes_with_it_by_default(real_model_path, monkeypatch):
    monkeypatch.setattr(llama_sampling, "MIN_VOCAB", MIN_VOCAB)
    same_tokens_either_way(real_model_path, monkeypatch)


def same_tokens_either_way(path, monkeypatch) -> None:
    def generate() -> list[list[int]]:
        with LlamaEngine(path, max_lanes=3, n_ctx=1024, n_batch=256) as engine:
            hello = engine.tokenizer.tokenize("hello there, how are you")
            requests = [
                Request(list(hello), SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True, repeat_penalty=1.3)),
                Request(list(hello), SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True,
                                                    repeat_penalty=1.1, logit_bias={hello[-1]: 2.5})),
                Request(engine.tokenizer.tokenize("a b c"), SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)),
            ]
            run(engine, requests)
            return [r.output_token_ids for r in requests]

    chosen = []
    # The engine hands every numpy-greedy row to choose_rows, which asks each sampler its key once.
    shared_key = GreedySampler.shared_key
    monkeypatch.setattr(GreedySampler, "shared_key", lambda self: chosen.append(1) or shared_key(self))
    fast = generate()
    assert len(chosen) == 3 * 40
    monkeypatch.setattr(llama_sampling, "takes_greedy_sampler", lambda sampling, n_vocab: False)
    assert fast == generate()
    # The penalty and the bias did something, or the comparison above shows little.
    assert fast[0] != fast[1] and len(set(fast[0])) > 4


@pytest.mark.parametrize("penalised", ["oldest in the window", "just outside it"])
def test_the_window_holds_the_last_64_tokens(penalised):
    a, b = 5, 6
    filler = [10 + i for i in range(PENALTY_LAST_N)]
    # a is the 64th token back (the window's oldest), b the 65th (gone), or the other way round.
    history = ([b, a] if penalised == "oldest in the window" else [a, b]) + filler[:PENALTY_LAST_N - 1]
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[[a, b]] = 3.0
    sampling = SamplingParams(temperature=0.0, repeat_penalty=1.5)
    chain = build_sampler_chain(sampling, VOCAB, (), history)
    try:
        expected = chain_choice(chain, logits)
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert expected == (b if penalised == "oldest in the window" else a)
    assert build_sampler(sampling, VOCAB, (), history).choose(logits) == expected


@pytest.mark.parametrize("seed", range(12))
def test_rows_chosen_together_pick_what_each_picks_alone(seed):
    """choose_rows against GreedySampler.choose row by row: shared biases, penalised rows, NaNs and rows out
    of order; the logits read as they came afterwards."""
    rng = np.random.default_rng(seed)
    rows = 12
    logits = (rng.integers(-4, 5, size=(rows, VOCAB)) / 2).astype(np.float32)
    if seed % 3 == 0:
        logits[rng.integers(rows), rng.integers(VOCAB, size=3)] = np.nan
    eog = [7, 9]
    kinds = [SamplingParams(temperature=0.0),
             SamplingParams(temperature=0.0, ignore_eos=True),
             SamplingParams(temperature=0.0, repeat_penalty=1.3)]
    picks = [kinds[int(k)] for k in rng.integers(len(kinds), size=rows)]
    histories = [[int(t) for t in rng.integers(VOCAB, size=int(rng.integers(0, 8)))] for _ in range(rows)]
    order = list(range(rows)) if seed % 2 else [int(r) for r in rng.permutation(rows)]
    together = [build_sampler(p, VOCAB, eog, h) for p, h in zip(picks, histories)]
    alone = [build_sampler(p, VOCAB, eog, h) for p, h in zip(picks, histories)]
    before = logits.copy()
    got = llama_sampling.choose_rows(together, logits, order)
    assert np.array_equal(logits, before, equal_nan=True)
    assert got == [alone[i].choose(logits[order[i]].copy()) for i in range(rows)]
    # Each accepted its token: the next step's penalties are the same too.
    assert [s._counts for s in together] == [s._counts for s in alone]


def test_a_large_block_read_by_several_threads_gives_each_row_s_argmax(monkeypatch):
    monkeypatch.setattr(llama_sampling, "PARALLEL_ARGMAX_ELEMENTS", 0)
    rng = np.random.default_rng(7)
    block = rng.integers(-3, 4, size=(9, VOCAB)).astype(np.float32)
    assert llama_sampling.argmax_rows(block).tolist() == np.argmax(block, axis=1).tolist()
