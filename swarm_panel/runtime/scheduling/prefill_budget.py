"""How many prompt tokens a step may carry beside decode rows when the prompt is deep in its context.

A prompt token's attention walks every token before it, so on a CPU a chunk's cost grows with where
it starts: on an Ice Lake Xeon a 128-token chunk of the demo model took 295 ms at 150 tokens of
context and 639 ms at 2,000 (benchmarks/attention_by_context.py). Every decode row in that step waits
for it, so one agent's long prompt held the seven others to a token a second or so. So where the
engine says attention bounds its prompt chunks (a CPU run), a chunk beside decode rows gets at most
the row-cells (tokens times positions attended) a full `prefill_chunk` has near a prompt's start; a
prompt that one chunk finishes goes whole, and a chunk alone in its step gets the full chunk. 8
agents, one sending ~4,000-token prompts: 15.7 against 8.6 tok/s with full chunks
(benchmarks/peer_servers.py --long-prompt-tokens 1300 --checkout OLD, 2 rounds); the shared-prompt
swarm the same. On a card the weight stream dominates a chunk, and a chunk keeps its tokens there (no
card was measured).
"""

from __future__ import annotations

import math


def reference_cells(prefill_chunk: int) -> int:
    """A full chunk's row-cells near a prompt's start: `prefill_chunk` tokens over twice as many positions."""
    return prefill_chunk * 2 * prefill_chunk


def tokens_within(start: int, cells: int, prefill_chunk: int) -> int:
    """The most prompt tokens from position `start` whose row-cells, n x max(start + n, 2 x prefill_chunk),
    fit `cells`; at least 1, so a prompt always moves."""
    floor = 2 * prefill_chunk
    n = cells // floor
    if start + n > floor:
        n = int((math.sqrt(start * start + 4 * cells) - start) / 2)
    return max(1, n)


def cells_of(start: int, tokens: int, prefill_chunk: int) -> int:
    return tokens * max(start + tokens, 2 * prefill_chunk)


# A prompt piece shorter than prefill_chunk // PIECE_SHARE is not worth a cut of its own (see piece_tokens).
PIECE_SHARE = 8


def piece_tokens(natural: int, available: int, prefill_chunk: int, whole_budget: int | None = None) -> int:
    """How many of the `natural` tokens a prompt has before its next cut (its end, or a checkpoint
    boundary) a step with `available` tokens of budget left takes: all of them when that overshoots
    the budget by at most prefill_chunk // PIECE_SHARE (the slack); none when fewer than the slack
    would fit, or when a later step's `whole_budget` (what a prompt first in line gets; None for a
    prompt that must not wait, the oldest) would take them whole; else `available`.

    llama.cpp runs a step as micro-batches in which every sequence takes the same number of tokens
    (always for hybrid and recurrent memory, and for attention with a KV stream per sequence), so
    every piece of a different length is one more pass over the weights: 9-21 ms on two cores for
    the ~140M demo hybrid, the cost of 3-8 of its prompt tokens (benchmarks/micro_batches.py fits
    it), and on a card, where a prompt token costs far less, many more. A budget's leftover, or a
    remainder of a few left for the next step, bought such a pass and a step of the prompt's
    latency for no progress: the prompt finished in the same step anyway."""
    slack = max(1, prefill_chunk // PIECE_SHARE)
    if natural <= available + slack:
        return natural
    if whole_budget is not None and available < whole_budget and natural <= whole_budget + slack:
        return 0
    return available if available >= slack else 0
