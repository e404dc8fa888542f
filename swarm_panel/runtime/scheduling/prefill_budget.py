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
