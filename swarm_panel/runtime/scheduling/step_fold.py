"""Folding a step back, for the scheduler's update(): each row into its request (`fold_row`), prefix
ops the engine refused (`apply_refusals`), and the step's StepStats: the rows folded back, and what
ended or was looked up since the last step.

A StepTally counts one step's rows as update() walks them; the builder keeps what happens between
records (requests that ended, for instance on abort, and prefix lookups made while planning) and
puts both together with the scheduler's state at the end of the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swarm_panel.runtime.core.engine import Row, RowKind, StepResult
from swarm_panel.runtime.core.request import Request, RequestOutput, RequestStatus, reaches_length
from swarm_panel.runtime.core.stats import LANE_DECODE, LANE_EMPTY, LANE_PADDING, LANE_PREFILL, LANE_STALLED, StepStats

if TYPE_CHECKING:
    from swarm_panel.runtime.scheduling.lanes import Lane
    from swarm_panel.runtime.scheduling.scheduler import Scheduler

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
