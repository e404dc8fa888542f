"""Greedy choice with logit bias and a repeat penalty, in numpy: the token llama.cpp's chain of
logit_bias, penalties and greedy samplers picks, without its per-row walk over the vocabulary.

llama_sampler_sample copies every logit into a candidate array, and the penalties sampler looks each
candidate up in a hash map: 0.36 ms a row for SmolLM2's 49k tokens, about 5% of a real-agents step
on the CPU. Here only the biased and penalised tokens are touched before one argmax (~0.04 ms).

The arithmetic is llama.cpp's, in float32 (src/llama-sampler.cpp): bias added; a token seen in the
last PENALTY_LAST_N accepted tokens has a non-positive logit multiplied by the penalty, a positive
one divided; then the first maximum wins (NaNs as llama.cpp's `>` treats them). Frequency and presence penalties stay with the chain:
their `count * freq + present` is a multiply-add a compiler may fuse, so exactness is not ours to
promise.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.request import SamplingParams

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
