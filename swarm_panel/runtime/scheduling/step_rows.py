"""A step's rows: a one-token row for every decoding and padding lane the KV left can carry, then
prompt chunks within the prefill budget, a prompt's first one after its prefix lookup. The scheduler's
`schedule()` calls these on itself.

How many prompt tokens a step may carry beside decode rows when the prompt is deep in its context.
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
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.engine import Row, RowKind
from swarm_panel.runtime.core.request import Request

if TYPE_CHECKING:
    from swarm_panel.runtime.scheduling.scheduler import Scheduler

# The oldest prompt's least share of a step's prefill budget (1/N) when the policy puts others first.
OLDEST_PROMPT_SHARE = 4


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


def one_token_rows(s: Scheduler) -> list[Row]:
    """A row for every decoding and padding lane the KV left can carry (the policy picks, if not all)."""
    while True:
        lanes = [lane for lane in s.lanes if lane.request and (lane.padding or lane.request.is_decoding)]
        free = s.kv.free_tokens
        if len(lanes) <= free:
            break
        if not s.prefix.evict_one() and (s.policy.pauses_lanes or not s.preempt_one()):
            break
    rows: list[Row] = []
    for lane in s.policy.lanes_to_run(s.view, lanes, max(free, 0)):
        request = lane.request
        if lane.padding:
            position = request.num_computed_tokens + lane.padding_tokens
            rows.append(Row(request, RowKind.PADDING, position, [request.token_ids[-1]], sample=True))
        else:
            start = request.num_computed_tokens
            rows.append(Row(request, RowKind.DECODE, start, request.token_ids[start:], sample=True))
    return rows

def prompt_chunks(s: Scheduler, planned: int) -> list[Row]:
    """Prompt chunks within the prefill budget and the KV left, a prompt's first one after its prefix lookup."""
    rows: list[Row] = []
    chunk = s.config.prefill_chunk
    budget = min(chunk, s.caps.max_step_tokens - planned)
    # Beside decode rows, deep chunks share a full chunk's row-cells near a prompt's start.
    reference = reference_cells(chunk)
    cells = reference if planned and s.caps.attention_bound_prefill else None
    by_age = sorted((lane for lane in s.lanes if lane.is_live and not lane.request.is_decoding),
                    key=lambda lane: lane.admitted_seq)
    for lane in by_age:
        if lane.reusable_hint is None and not lane.prefix_checked and s.reuse_enabled:
            lane.reusable_hint = s.prefix.reusable(lane, s.lanes)
    prefilling = s.policy.prefill_order(s.view, by_age)
    # However the policy orders prompts, the oldest keeps a share of every step, so a stream of
    # newer prompts that the order puts first cannot starve it.
    held = budget // OLDEST_PROMPT_SHARE if prefilling and prefilling[0] is not by_age[0] else 0
    whole_budget = budget
    computing: list[Request] = []
    for lane in prefilling:
        oldest = lane is by_age[0]
        available = budget if oldest else budget - held
        if oldest:
            held = 0
        if budget <= 0 or not s.prefix.make_room(planned + 1):
            break
        # The oldest prompt keeps its share of the row-cells too.
        room = None if cells is None else max(cells, reference // OLDEST_PROMPT_SHARE) if oldest else cells
        if available <= 0 or (room is not None and room <= 0):
            continue
        request = lane.request
        if not lane.prefix_checked:
            if s.reuse_enabled and s.prefix.waits_for_earlier(request, computing):
                continue
            lane.prefix_checked = True
            if s.reuse_enabled:
                queried = request.num_tokens
                s.stats.prefix_looked_up(request.agent, queried, s.prefix.reuse(lane, s.lanes, planned))
            s.prefix.make_sequence_room(s.lanes)
        start = request.num_computed_tokens
        # Where the prompt's next cut falls with no budget: the piece that would go whole.
        whole = s.prefix.chunk_end(request, start, request.num_tokens)
        want = min(piece_tokens(whole.end - start, available, chunk, None if oldest else whole_budget),
                   s.caps.max_step_tokens - planned)
        if held:
            want = min(want, available)  # no overshoot into the oldest prompt's share
        if want <= 0:
            continue
        # A prompt that one chunk finishes goes whole: only a long one, deep in, gives way.
        if room is not None and request.num_tokens - start > chunk:
            want = min(want, tokens_within(start, room, chunk))
        s.prefix.make_room(planned + want)
        limit = start + min(want, s.kv.free_tokens - planned)
        cut = whole if limit >= whole.end else s.prefix.chunk_end(request, start, limit)
        end = cut.end
        rows.append(Row(request, RowKind.PREFILL, start, request.token_ids[start:end], end == request.num_tokens,
                        checkpoint=cut.checkpoint, checkpoint_start=cut.checkpoint_start,
                        store_prefix=cut.store_prefix))
        n = end - start
        budget -= n
        if cells is not None:
            cells -= cells_of(start, n, chunk)
        planned += n
        computing.append(request)
    return rows
