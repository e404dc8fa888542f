"""One llama.cpp sampler chain per request, built from its SamplingParams; grammars and logprobs."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.request import SamplingParams, TokenLogprob
from swarm_panel.runtime.llama.greedy_sampler import PENALTY_LAST_N, GreedySampler, takes_greedy_sampler
from swarm_panel.runtime.llama.log import ensure_backend, take_recent_problems

GRAMMAR_ROOT = b"root"


class ChainSampler:
    """A llama.cpp sampler chain, for whatever GreedySampler does not do."""

    def __init__(self, chain: llama_cpp.llama_sampler_p) -> None:
        self.chain = chain

    def sample(self, ctx: llama_cpp.llama_context_p, index: int) -> int:
        # Where the chain ran on the backend this returns (and accepts) the token it drew there.
        return llama_cpp.llama_sampler_sample(self.chain, ctx, index)

    def close(self) -> None:
        free_sampler_chain(self.chain)
        self.chain = None


class BackendGreedySampler:
    """Greedy choice inside the compute graph: a chain of logit bias, penalties and temperature 0, which on
    the backend cuts each row to its one best token (llama.cpp's backend greedy sampler would leave the whole
    row of logits to be copied to the host at the vendored commit). The token is read from the row's one
    candidate and accepted into the chain, which keeps the penalties' window as the host chain does."""

    def __init__(self, chain: llama_cpp.llama_sampler_p) -> None:
        self.chain = chain

    def sample(self, ctx: llama_cpp.llama_context_p, index: int) -> int:
        if llama_cpp.llama_get_sampled_candidates_count_ith(ctx, index) != 1:
            raise RuntimeError("the backend did not cut the row to its best token")
        token = llama_cpp.llama_get_sampled_candidates_ith(ctx, index)[0]
        llama_cpp.llama_sampler_accept(self.chain, token)
        return token

    def close(self) -> None:
        free_sampler_chain(self.chain)
        self.chain = None


def runs_on_backend(sampling: SamplingParams) -> bool:
    """Whether the request's chain runs inside the compute graph, leaving only a few values a row to copy
    to the host: greedy (with bias and penalties), or a draw after top-k. A grammar walks the vocabulary's
    text on the host, logprobs need the raw logits there, and a draw over the whole vocabulary would copy
    its logits and probabilities back (two rows where the host path copies one)."""
    if sampling.grammar is not None or sampling.logprobs is not None:
        return False
    return sampling.temperature == 0.0 or sampling.top_k > 0


def build_backend_sampler(sampling: SamplingParams, n_vocab: int, eog_tokens: Iterable[int],
                          history: Sequence[int] = ()) -> BackendGreedySampler | ChainSampler:
    """A chain for llama_set_sampler, for a request runs_on_backend accepts."""
    chain = build_sampler_chain(sampling, n_vocab, eog_tokens, history, backend=True)
    return BackendGreedySampler(chain) if sampling.temperature == 0.0 else ChainSampler(chain)


def build_sampler(
    sampling: SamplingParams,
    n_vocab: int,
    eog_tokens: Iterable[int],
    history: Sequence[int] = (),
    vocab: llama_cpp.llama_vocab_p | None = None,
    output: Sequence[int] = (),
) -> GreedySampler | ChainSampler:
    """A request's sampler: numpy for plain greedy (with bias and repeat penalty) over a large
    vocabulary, else llama.cpp's chain; both pick the same tokens. Arguments and errors as build_sampler_chain's."""
    if takes_greedy_sampler(sampling, n_vocab):
        return GreedySampler(n_vocab, logit_bias(sampling, n_vocab, eog_tokens), sampling.repeat_penalty, history)
    return ChainSampler(build_sampler_chain(sampling, n_vocab, eog_tokens, history, vocab, output))


def logit_bias(sampling: SamplingParams, n_vocab: int, eog_tokens: Iterable[int]) -> dict[int, float]:
    """The request's bias per token, end-of-generation tokens barred when it ignores them; raises
    ValueError for a token outside the vocabulary."""
    bias = dict(sampling.logit_bias)
    for token in bias:
        if not 0 <= token < n_vocab:
            raise ValueError(f"logit_bias names token {token}, outside the vocabulary (0..{n_vocab - 1})")
    if sampling.ignore_eos:
        bias.update(dict.fromkeys(eog_tokens, float("-inf")))
    return bias


def build_sampler_chain(
    sampling: SamplingParams,
    n_vocab: int,
    eog_tokens: Iterable[int],
    history: Sequence[int] = (),
    vocab: llama_cpp.llama_vocab_p | None = None,
    output: Sequence[int] = (),
    backend: bool = False,
) -> llama_cpp.llama_sampler_p:
    """Return a new chain: logit bias, penalties, grammar, then greedy or top-k/top-p/min-p/temperature/dist.

    `history` (the request's tokens so far) primes the penalties window, `output` (the tokens it has
    already generated) the grammar. `backend`: greedy ends in temperature 0, which on the backend keeps
    only the row's best token (BackendGreedySampler reads it). The caller frees the chain
    with llama_sampler_free. Raises ValueError for a logit bias on a token outside the vocabulary, or
    a grammar that does not parse; a grammar needs `vocab`.
    """
    bias = logit_bias(sampling, n_vocab, eog_tokens)
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
        penalties = llama_cpp.llama_sampler_init_penalties(
            n_vocab, PENALTY_LAST_N, sampling.repeat_penalty, sampling.frequency_penalty, sampling.presence_penalty
        )
        # Primed on its own: a grammar in the same chain must not see the prompt.
        for token in history[-PENALTY_LAST_N:]:
            llama_cpp.llama_sampler_accept(penalties, token)
        add(penalties)
    if sampling.grammar is not None:
        # Before the truncating samplers, so they choose among grammar-valid tokens only. The grammar
        # mask walks the vocabulary each step: only this lane pays it.
        grammar = llama_cpp.llama_sampler_init_grammar(vocab, sampling.grammar.encode(), GRAMMAR_ROOT)
        if not grammar:
            llama_cpp.llama_sampler_free(chain)
            raise ValueError("the grammar does not parse")
        # A recomputed (preempted) request resumes the grammar where its output left it.
        for token in output:
            llama_cpp.llama_sampler_accept(grammar, token)
        add(grammar)
    if sampling.temperature == 0.0:
        add(llama_cpp.llama_sampler_init_temp(0.0) if backend else llama_cpp.llama_sampler_init_greedy())
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
    return chain


def schema_to_gbnf(schema: dict[str, Any], rule: str = "root") -> str:
    """llama-cpp-python's JSON Schema -> GBNF conversion, the top rule named `rule`; raises on schemas it cannot express."""
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "request"), "" if rule == "root" else rule)
    return converter.format_grammar()


def grammar_problem(grammar: str) -> str | None:
    """Why llama.cpp refuses this GBNF grammar, or None when it parses (checked without a model)."""
    ensure_backend()
    take_recent_problems()
    # Parsing needs no vocabulary; only token references (<[id]>) would, and they are refused here.
    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode(), GRAMMAR_ROOT)
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
        return None
    return "; ".join(take_recent_problems()) or "the grammar does not parse"


def token_logprob(
    ctx: llama_cpp.llama_context_p, index: int, n_vocab: int, token: int, top_n: int,
    piece: Callable[[int], bytes], end: bool,
) -> TokenLogprob:
    """The sampled token's log-softmax over the raw logits at batch row `index`, and its top_n rivals."""
    logits = np.ctypeslib.as_array(ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, index),
                                               ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
    peak = float(logits.max())
    log_norm = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    top: tuple[tuple[int, bytes, float], ...] = ()
    if top_n:
        best = np.argpartition(logits, -top_n)[-top_n:]
        best = best[np.argsort(-logits[best], kind="stable")]
        top = tuple((int(t), piece(int(t)), float(logits[t]) - log_norm) for t in best)
    return TokenLogprob(token, piece(token), float(logits[token]) - log_norm, top, end)


def free_sampler_chain(chain: llama_cpp.llama_sampler_p | None) -> None:
    if chain:
        llama_cpp.llama_sampler_free(chain)

