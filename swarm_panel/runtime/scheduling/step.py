"""A step's rows, out and back: planned for the scheduler's schedule(), folded back in its update().

Out: a one-token row for every decoding and padding lane the KV left can carry, then prompt chunks
within the prefill budget, a prompt's first one after its prefix lookup (`one_token_rows`,
`prompt_chunks`, which `schedule()` calls on the scheduler).

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

Back: each row into its request (`fold_row`), prefix ops the engine refused (`apply_refusals`), and
the step's StepStats: the rows folded back, and what ended or was looked up since the last step. A
StepTally counts one step's rows as update() walks them; the builder keeps what happens between
records (requests that ended, for instance on abort, and prefix lookups made while planning) and
puts both together with the scheduler's state at the end of the step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from swarm_panel.runtime.core.engine import Row, RowKind, StepResult
from swarm_panel.runtime.core.request import Request, RequestOutput, RequestStatus, reaches_length
from swarm_panel.runtime.core.stats import LANE_DECODE, LANE_EMPTY, LANE_PADDING, LANE_PREFILL, LANE_STALLED, StepStats

if TYPE_CHECKING:
    from swarm_panel.runtime.scheduling.lanes import Lane
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


# ----- folding a step back -----

_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)
_ROW_LANE_STATE = {RowKind.DECODE: LANE_DECODE, RowKind.PREFILL: LANE_PREFILL, RowKind.PADDING: LANE_PADDING}


class StepTally:
    """One step's rows as update() folds them back."""

    __slots__ = ("decode_rows", "itl", "lanes", "padding_rows", "prefill_rows", "prefill_tokens", "ttft", "useful")

    def __init__(self, lanes: list[Lane]) -> None:
        # One state character per lane; a lane that holds a request but gets no row stays stalled.
        self.lanes = [LANE_EMPTY if lane.request is None else LANE_STALLED for lane in lanes]
        self.decode_rows = self.prefill_rows = self.prefill_tokens = self.padding_rows = self.useful = 0
        self.ttft: list[tuple[str, float]] = []
        self.itl: list[tuple[str, float]] = []

    def count(self, rows: list[Row], lane_of: dict[int, Lane]) -> None:
        """The rows about to be folded back, counted while their lanes still hold them."""
        for row in rows:
            self.lanes[lane_of[row.request.request_id].index] = _ROW_LANE_STATE[row.kind]
            if row.kind is RowKind.PADDING:
                self.padding_rows += 1
            elif row.kind is RowKind.DECODE:
                self.decode_rows += 1
            else:
                self.prefill_rows += 1
                self.prefill_tokens += len(row.tokens)


class StatsBuilder:
    def __init__(self) -> None:
        self._finished = 0
        self._e2e: list[tuple[str, float]] = []
        self._prefix_queries = self._prefix_hits = 0
        self._prefix_agents: dict[str, list[int]] = {}

    def ended(self, request: Request, now: float) -> None:
        self._finished += 1
        if request.status in _COMPLETED:
            self._e2e.append((request.agent, now - request.arrival_time))

    def prefix_looked_up(self, agent: str, queried: int, reused: int) -> None:
        counts = self._prefix_agents.setdefault(agent, [0, 0])
        self._prefix_queries += queried
        self._prefix_hits += reused
        counts[0] += queried
        counts[1] += reused

    def prefix_refused(self, agent: str, reused: int) -> None:
        """Tokens counted as reused that the engine could not move after all."""
        self._prefix_hits -= reused
        self._prefix_agents.get(agent, [0, 0])[1] -= reused

    def build(self, tally: StepTally, sched: Any, now: float, duration: float) -> StepStats:
        # sched is the Scheduler that owns this builder (scheduling.scheduler), read at the step's end.
        finished, self._finished = self._finished, 0
        e2e, self._e2e = self._e2e, []
        queries, hits, agents = self._prefix_queries, self._prefix_hits, self._prefix_agents
        self._prefix_queries = self._prefix_hits = 0
        self._prefix_agents = {}
        lanes = "".join(tally.lanes)
        live = tally.decode_rows + tally.prefill_rows + lanes.count(LANE_STALLED)
        checkpoints = sched.caps.checkpoints
        parked = sched.caps.parked
        return StepStats(
            index=sched.num_steps,
            time=now,
            duration=duration,
            policy=sched.policy.name,
            num_lanes=sched.config.num_lanes,
            width_held=live + tally.padding_rows,
            live_lanes=live,
            padding_lanes=tally.padding_rows,
            decode_rows=tally.decode_rows,
            prefill_rows=tally.prefill_rows,
            prefill_tokens=tally.prefill_tokens,
            useful_tokens=tally.useful,
            queue_depth=len(sched.waiting),
            kv_used=sched.kv_used,
            kv_capacity=sched.kv_budget,
            kv_cached=sched.kv_cached,
            cached_sequences=sched.prefix_cache.num_resident,
            checkpoints=len(checkpoints) if checkpoints is not None else 0,
            checkpoint_bytes=checkpoints.num_bytes if checkpoints is not None else 0,
            checkpoint_budget_bytes=checkpoints.budget_bytes if checkpoints is not None else 0,
            parked_sequences=len(parked) if parked is not None else 0,
            parked_bytes=parked.num_bytes if parked is not None else 0,
            park_budget_bytes=parked.budget_bytes if parked is not None else 0,
            prefix_queries=queries,
            prefix_hits=hits,
            prefix_agents=[(agent, q, h) for agent, (q, h) in agents.items()],
            finished=finished,
            lanes=lanes,
            ttft=tally.ttft,
            itl=tally.itl,
            e2e=e2e,
        )


def fold_row(s: Scheduler, row: Row, result: StepResult, now: float, tally: StepTally) -> int:
    """Folds one row back into its request; returns the KV tokens its lane gained."""
    request = row.request
    lane = s.lanes.of[request.request_id]
    if row.kind is RowKind.PADDING:
        lane.padding_tokens += 1
        return 1
    error = result.errors.get(request.request_id)
    if error is not None:
        s.finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, error)
        return 0
    computed = len(row.tokens)
    request.num_computed_tokens += computed
    if not row.sample:
        return computed
    sample = result.samples.get(request.request_id)
    if sample is None:
        s.finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, "the engine returned no token")
        return computed
    tally.useful += 1
    if request.first_token_time is None:
        request.first_token_time = now
        tally.ttft.append((request.agent, now - request.arrival_time))
    else:
        tally.itl.append((request.agent, now - request.last_token_time))
    request.last_token_time = now
    request.token_ids.append(sample.token)
    request.output_text_parts.append(sample.text)
    if sample.stop:
        s.finish_in_lane(lane, RequestStatus.FINISHED_STOPPED, now, None, new_token=sample)
    elif reaches_length(request, s.caps.max_context, new_tokens=0):
        s.finish_in_lane(lane, RequestStatus.FINISHED_LENGTH, now, None, new_token=sample)
    else:
        output = RequestOutput(request.request_id, [sample.token], sample.text, False)
        s.outputs.append((request, output))
    return computed

def apply_refusals(s: Scheduler, result: StepResult) -> None:
    """Prefix ops the engine's memory could not do: their destinations recompute from position 0,
    and a finished sequence it could not keep leaves the cache."""
    for request_id, why in result.refused.items():
        lane = s.lanes.of.get(request_id)
        if lane is not None and lane.is_live:
            s.stats.prefix_refused(lane.request.agent, s.prefix.recompute(lane.request, why))
        else:
            s.prefix_cache.discard(request_id)
