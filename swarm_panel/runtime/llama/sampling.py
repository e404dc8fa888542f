"""One llama.cpp sampler chain per request, built from its SamplingParams; grammars and logprobs.

Plain greedy in numpy (GreedySampler, below), where a request's sampling takes it: the argmax of rows' logits without a llama.cpp sampler chain.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.request import SamplingParams, TokenLogprob
from swarm_panel.runtime.llama.model import ensure_backend, take_recent_problems

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


PENALTY_LAST_N = 64
# Below this the chain's walk is cheaper than numpy's fixed cost per call: timed once (docs/benchmarks.md),
# 2-4 µs a row by the chain against 7-17 µs by numpy at the demo model's 392 tokens, 0.15-0.33 ms against
# 0.016-0.038 ms at SmolLM2's 49k; the two lines cross near 2,500 tokens.
MIN_VOCAB = 4096
# A block of rows this large (16 MB of float32: 16 rows of Qwen3.5's 248k tokens) is read by several threads.
PARALLEL_ARGMAX_ELEMENTS = 1 << 22


def takes_greedy_sampler(sampling: SamplingParams, n_vocab: int) -> bool:
    return (n_vocab >= MIN_VOCAB and sampling.temperature == 0.0 and sampling.grammar is None
            and sampling.frequency_penalty == 0.0 and sampling.presence_penalty == 0.0)


class GreedySampler:
    def __init__(self, n_vocab: int, bias: dict[int, float], repeat_penalty: float,
                 history: Sequence[int] = ()) -> None:
        self.n_vocab = n_vocab
        self._bias_ids = np.fromiter(bias, dtype=np.intp, count=len(bias))
        self._bias = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        self._penalty = np.float32(repeat_penalty)
        # llama.cpp's penalties sampler is off at exactly 1 in float32, and so keeps no window.
        self._window: deque[int] | None = deque() if self._penalty != 1.0 else None
        self._counts: Counter[int] = Counter()
        for token in history[-PENALTY_LAST_N:]:
            self.accept(token)

    def accept(self, token: int) -> None:
        window = self._window
        if window is None:
            return
        if len(window) >= PENALTY_LAST_N:
            old = window.popleft()
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        window.append(token)
        self._counts[token] += 1

    def choose(self, logits: np.ndarray) -> int:
        """The token for this row of float32 logits, accepted into the penalty window.

        The few biased and penalised entries are changed in place for the argmax and put back after, so
        the row reads as it came (logprobs read it next) and no copy of the vocabulary is made: at
        Qwen3.5's 248k tokens a copy a row cost more than the argmax."""
        if not len(self._bias_ids) and not self._counts:
            return self._pick(logits)
        touched = self._bias_ids
        if self._counts:
            seen = np.fromiter(self._counts, dtype=np.intp, count=len(self._counts))
            touched = np.union1d(touched, seen)
        kept = logits[touched]
        try:
            logits[self._bias_ids] += self._bias
            if self._counts:
                values = logits[seen]
                positive = values > 0
                # A penalty of 0 makes +inf of a positive logit and NaN of a barred one, as in C.
                with np.errstate(divide="ignore", invalid="ignore"):
                    values[~positive] *= self._penalty
                    values[positive] /= self._penalty
                logits[seen] = values
            return self._pick(logits)
        finally:
            logits[touched] = kept

    def _pick(self, logits: np.ndarray) -> int:
        token = int(np.argmax(logits))
        if np.isnan(logits[token]):
            # argmax takes the first NaN; llama.cpp's `>` never picks one, and never leaves a NaN first.
            token = 0 if np.isnan(logits[0]) else int(np.nanargmax(logits))
        self.accept(token)
        return token

    def sample(self, ctx: llama_cpp.llama_context_p, index: int) -> int:
        pointer = ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, index), ctypes.POINTER(ctypes.c_float))
        return self.choose(np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)))

    def close(self) -> None:
        """Nothing to free: a chain's counterpart."""

    def shared_key(self) -> bytes | None:
        """Samplers with the same key change the same logits the same way this step (their bias, and no
        penalised token yet), so one argmax over their rows together picks for all; None: this row alone."""
        if self._counts:
            return None
        return self._bias_ids.tobytes() + self._bias.tobytes()


def argmax_rows(block: np.ndarray) -> np.ndarray:
    """Each row's argmax; a block of many large rows is split across threads (numpy's argmax lets go of the
    GIL), since reading it from memory is the cost and the device is idle meanwhile."""
    if block.size < PARALLEL_ARGMAX_ELEMENTS or len(block) < 2:
        return np.argmax(block, axis=1)
    pool, workers = _argmax_pool()
    parts = np.array_split(np.arange(len(block)), workers)
    picks = np.empty(len(block), dtype=np.intp)
    done = [pool.submit(np.argmax, block[p[0]:p[-1] + 1], 1, picks[p[0]:p[-1] + 1]) for p in parts if len(p)]
    for future in done:
        future.result()
    return picks


@functools.cache
def _argmax_pool() -> tuple[ThreadPoolExecutor, int]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    workers = max(1, min(cores, 4))
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swarm-argmax"), workers


def choose_rows(samplers: Sequence[GreedySampler], logits: np.ndarray, rows: Sequence[int]) -> list[int]:
    """Each sampler's token from its row of `logits` (a step's output rows): consecutive rows whose samplers
    share a key take one argmax over the block, as GreedySampler.choose would pick row by row; at Qwen3.5's
    248k tokens a row's own numpy calls cost as much as its argmax."""
    tokens: list[int | None] = [None] * len(samplers)
    groups: dict[bytes, list[int]] = {}
    for i, sampler in enumerate(samplers):
        key = sampler.shared_key()
        if key is None:
            tokens[i] = sampler.choose(logits[rows[i]])
        else:
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        first, count = rows[members[0]], len(members)
        if [rows[i] for i in members] != list(range(first, first + count)):
            for i in members:
                tokens[i] = samplers[i].choose(logits[rows[i]])
            continue
        lead = samplers[members[0]]
        block = logits[first:first + count]
        ids = lead._bias_ids
        kept = block[:, ids].copy()
        try:
            block[:, ids] += lead._bias
            picks = argmax_rows(block)
            nans = np.isnan(block[np.arange(count), picks])
        finally:
            block[:, ids] = kept
        for j, i in enumerate(members):
            if nans[j]:
                tokens[i] = samplers[i].choose(block[j])
            else:
                tokens[i] = int(picks[j])
                samplers[i].accept(tokens[i])
    return tokens
