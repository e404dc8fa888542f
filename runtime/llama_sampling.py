"""One llama.cpp sampler chain per request, built from its SamplingParams."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import llama_cpp

from runtime.request import SamplingParams

# llama.cpp's default window for repeat/frequency/presence penalties.
PENALTY_LAST_N = 64


def build_sampler_chain(
    sampling: SamplingParams,
    n_vocab: int,
    eog_tokens: Iterable[int],
    history: Sequence[int] = (),
) -> llama_cpp.llama_sampler_p:
    """Return a new chain: logit bias, penalties, then greedy or top-k/top-p/min-p/temperature/dist.

    `history` (the request's tokens so far) primes the penalties window. The caller frees the chain
    with llama_sampler_free. Raises ValueError for a logit bias on a token outside the vocabulary.
    """
    bias = dict(sampling.logit_bias)
    for token in bias:
        if not 0 <= token < n_vocab:
            raise ValueError(f"logit_bias names token {token}, outside the vocabulary (0..{n_vocab - 1})")
    if sampling.ignore_eos:
        bias.update(dict.fromkeys(eog_tokens, float("-inf")))

    params = llama_cpp.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = llama_cpp.llama_sampler_chain_init(params)

    def add(sampler: llama_cpp.llama_sampler_p) -> None:
        llama_cpp.llama_sampler_chain_add(chain, sampler)

    if bias:
        entries = (llama_cpp.llama_logit_bias * len(bias))(
            *(llama_cpp.llama_logit_bias(token, value) for token, value in bias.items())
        )
        add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(bias), entries))
    penalised = (
        sampling.repeat_penalty != 1.0 or sampling.frequency_penalty != 0.0 or sampling.presence_penalty != 0.0
    )
    if penalised:
        add(
            llama_cpp.llama_sampler_init_penalties(
                n_vocab,
                PENALTY_LAST_N,
                sampling.repeat_penalty,
                sampling.frequency_penalty,
                sampling.presence_penalty,
            )
        )
    if sampling.temperature == 0.0:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        if sampling.top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
        if sampling.top_p < 1.0:
            add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
        if sampling.min_p > 0.0:
            add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
        seed = llama_cpp.LLAMA_DEFAULT_SEED if sampling.seed is None else sampling.seed & 0xFFFFFFFF
        add(llama_cpp.llama_sampler_init_dist(seed))
    if penalised:
        for token in history[-PENALTY_LAST_N:]:
            llama_cpp.llama_sampler_accept(chain, token)
    return chain


def free_sampler_chain(chain: llama_cpp.llama_sampler_p | None) -> None:
    if chain:
        llama_cpp.llama_sampler_free(chain)

