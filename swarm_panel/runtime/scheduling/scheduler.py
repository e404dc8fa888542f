"""One scheduler for every policy: a waiting queue, lanes and chunked prefill, planned and folded back each step.

Each step is planned in two halves, as in vLLM's v1 scheduler: `schedule()` turns lane state into
a StepPlan (decode and padding rows first, then prompt chunks within the prefill budget), and
`update()` folds the engine's samples back into the requests and returns a StepOutcome: the outputs
for the requests' listeners and the step's StepStats. A request has no prefill or decode phase of
its own; it has `num_computed_tokens` catching up with `num_tokens`.

The scheduler is sized by the engine's EngineCaps (runtime.core.engine) and holds its parts:
- runtime.scheduling.lanes: the batch's width, which request each lane holds, the KV that costs
  (KVBudget, live counters of what is held), and who gives it up when evicting is not enough; and
  admission: a config the engine holds, and waiting requests into free lanes while the budget holds
  their prompts (a request reaches `add` admitted: its limits were settled there);
- runtime.scheduling.step: a step's rows, one-token rows then prompt chunks within the prefill budget, and
  their folding back into the requests and the step's StepStats;
- runtime.scheduling.prefix_planner.PrefixPlanner: cached prefixes, their reuse, and the releases a plan carries;
- a policy (runtime.policies.policy, runtime.policies.registry), which reads a runtime.policies.policy.SchedulerView
  and returns decisions: who may enter, whether finished lanes pad, who computes under pressure;
- runtime.core.step_outcome: what the calls hand back.

Requests that end between steps (abort, a lowered budget, an engine out of KV) are handed back by
the call that ended them. At the end of every step it asserts its invariants: the KV counter equals
a fresh recount, the lane map holds exactly the occupied lanes, no lane pads after its batch ended.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from operator import attrgetter

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, Row, StepPlan, StepResult
from swarm_panel.runtime.core.request import Request, RequestOutput, RequestStatus
from swarm_panel.runtime.core.step_outcome import Delivery, StepOutcome
from swarm_panel.runtime.policies.policy import AgentService, Policy, SchedulerView
from swarm_panel.runtime.policies.registry import make_policy
from swarm_panel.runtime.reuse.prefix_cache import PrefixCache, ReturnForecast
from swarm_panel.runtime.scheduling.lanes import (
    KVBudget,
    Lane,
    LaneTable,
    checked_config,
    fill_free_lanes,
    pick_victim,
    unfit_after_change,
)
from swarm_panel.runtime.scheduling.prefix_planner import PrefixPlanner
from swarm_panel.runtime.scheduling.step import (
    StatsBuilder,
    StepTally,
    apply_refusals,
    fold_row,
    one_token_rows,
    prompt_chunks,
)

log = logging.getLogger(__name__)

# Aborted too: an agent whose idle watchdog or timeout hung up resends the same prompt, which then
# resumes where the first left off instead of computing a long prompt again from its first token.
_CACHEABLE = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED)
# Cached sequences parked in host RAM at most, where the engine parks evicted ones: each admitted
# prompt is compared with every entry, so the count stays small beside the engine's byte budget.
MAX_PARKED = 256


class Scheduler:
    def __init__(self, config: SchedulerConfig, caps: EngineCaps) -> None:
        self.caps = caps
        self.config = checked_config(config, caps)
        self.policy: Policy = make_policy(config.policy)
        self.view = SchedulerView(self)
        # Per-agent service, kept across policy switches: the agent-aware policies rank by it.
        self.service = AgentService()
        self.waiting: deque[Request] = deque()
        self.num_steps = 0
        # Outputs of the call now running; every public call hands them back before it returns.
        self.outputs: list[Delivery] = []
        # 0 entries means the engine takes no prefix ops: no reuse at all.
        # When each agent is likely back from its tool: what cached sequences are evicted and parked by.
        self.forecast = ReturnForecast()
        self.prefix_cache = PrefixCache(caps.max_cached_sequences, MAX_PARKED if caps.parks_evicted else 0,
                                        self.forecast)
        self.prefix_cache.queued = self._queued
        self.kv = KVBudget(caps.kv_capacity, caps.sequence_state_tokens, self.prefix_cache)
        self.kv.limit = config.kv_budget
        self.lanes = LaneTable(config.num_lanes, self.kv)
        self.prefix = PrefixPlanner(self.prefix_cache, self.kv, caps, config)
        self.stats = StatsBuilder()

    @classmethod
    def for_engine(cls, config: SchedulerConfig, engine) -> Scheduler:
        """A scheduler sized to what the engine holds, prefix cache included."""
        return cls(config, engine.caps)

    def _queued(self) -> Iterator[Request]:
        """Requests yet to take their prefix: admitted ones first, then the queue in its order."""
        for lane in self.lanes:
            if lane.request is not None and not lane.prefix_checked and not lane.padding:
                yield lane.request
        yield from self.waiting

    # -- public surface ------------------------------------------------------------------------

    @property
    def kv_budget(self) -> int:
        return self.kv.total

    @property
    def kv_used(self) -> int:
        return self.kv.used

    @property
    def kv_cached(self) -> int:
        """KV tokens held by finished sequences kept for prefix reuse (not part of kv_used)."""
        return self.kv.cached

    @property
    def reuse_enabled(self) -> bool:
        return self.prefix.reuse_enabled

    @property
    def num_evictions(self) -> int:
        return self.prefix.num_evictions

    @property
    def num_occupied_lanes(self) -> int:
        return self.lanes.num_occupied

    @property
    def num_running(self) -> int:
        return self.lanes.num_running

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.lanes.of or self.prefix.has_releases)

    def add(self, request: Request, now: float) -> None:
        """Queues an admitted request (runtime.scheduling.lanes.settle decided that it fits)."""
        request.arrival_time = now
        request.status = RequestStatus.WAITING
        self.service.arrived(request)
        self.forecast.arrived(request.agent, now)
        self.waiting.append(request)

    def abort(self, request_id: int, now: float, error: str | None = None) -> list[Delivery]:
        """Ends a request wherever it is; returns its last output (none when it is unknown or already done)."""
        status = RequestStatus.FINISHED_ERROR if error else RequestStatus.FINISHED_ABORTED
        lane = self.lanes.of.get(request_id)
        if lane is not None:
            if lane.is_live:
                self.finish_in_lane(lane, status, now, error)
                self._settle_padding()
        else:
            request = next((r for r in self.waiting if r.request_id == request_id), None)
            if request is not None:
                self.waiting.remove(request)
                self._finish(request, status, now, error)
        return self._take_outputs()

    def reconfigure(self, config: SchedulerConfig, now: float) -> list[Delivery]:
        """Applies new knobs; called only between steps. Returns the outputs of requests that no longer fit."""
        config = checked_config(config, self.caps)
        old, self.config = self.config, config
        self.kv.limit = config.kv_budget
        self.prefix.config = config
        if config.policy != old.policy:
            log.info("policy %s -> %s at step %d", old.policy, config.policy, self.num_steps)
            self.policy = make_policy(config.policy)
            self._settle_padding()
        self.lanes.resize(config.num_lanes)
        self._fail_unfittable(now)
        if not config.prefix_cache:
            self.drop_prefix_cache()
        return self._take_outputs()

    def take_over(self, old: Scheduler) -> None:
        """Takes on everything an old scheduler queued or ran, on an engine that dropped every
        sequence (a relayout): live requests recompute from their first token, oldest first and ahead
        of the waiting ones, as preempted requests do; padding lanes and cached prefixes are gone."""
        self.service, self.stats, self.num_steps = old.service, old.stats, old.num_steps
        for lane in sorted(old.lanes.live(), key=attrgetter("admitted_seq")):
            request = lane.request
            request.num_computed_tokens = 0
            request.num_preemptions += 1
            request.status = RequestStatus.WAITING
            self.waiting.append(request)
        self.waiting.extend(old.waiting)
        old.waiting.clear()

    def drop_prefix_cache(self) -> None:
        """Releases every cached sequence (live ones are untouched)."""
        self.prefix.drop_all()

    def fail_unqueued(self, request: Request, now: float, message: str) -> list[Delivery]:
        """Ends a request that never made it into the queue, so its listener still hears."""
        self._finish(request, RequestStatus.FINISHED_ERROR, now, message)
        return self._take_outputs()

    def end_batch(self) -> None:
        """Releases every padding lane, as when a static batch's last live sequence ends."""
        self._end_padding()

    def handle_kv_full(self, now: float) -> list[Delivery]:
        """The engine had less room than the budget promised: shrink the budget to what it holds."""
        used = self.kv_used + self.kv_cached
        if used < self.kv_budget:
            log.warning("KV budget lowered from %d to %d tokens after the engine ran out", self.kv_budget, used)
            self.kv.capacity = max(used, 1)
        if not self.prefix.evict_one() and not self.preempt_one():
            # Only one live lane is left (or none): it cannot wait for anyone's KV, so it fails.
            victim, _ = pick_victim(self.lanes, self.policy, self.view)
            if victim is not None:
                self.finish_in_lane(victim, RequestStatus.FINISHED_ERROR, now, "the engine ran out of KV cache")
        return self._take_outputs()

    def next_admission_time(self) -> float | None:
        return self.policy.next_admission_time(self.view)

    # -- planning ------------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan:
        self.lanes.resize(self.config.num_lanes)
        if self.prefix_cache and not self.reuse_enabled:
            self.drop_prefix_cache()
        # A lowered budget: cached sequences yield before anything is planned.
        self.prefix.make_room(0)
        self._admit(now)
        rows = self._plan_rows()
        release, ops = self.prefix.take()
        plan = StepPlan(rows=rows, release=release, prefix_ops=ops)
        assert plan.num_tokens <= self.caps.max_step_tokens, "plan exceeds the engine's step size"
        assert self.kv_used + self.kv_cached + plan.num_tokens <= self.kv_budget or not rows, \
            "plan exceeds the KV budget"
        return plan

    def _admit(self, now: float) -> None:
        admission = self.policy.admit(self.view, now)
        if admission.order is not None:
            assert len(admission.order) == len(self.waiting), "a policy's order must hold the whole queue"
            self.waiting.clear()
            self.waiting.extend(admission.order)
        if admission.enter:
            fill_free_lanes(self.waiting, self.lanes, self.kv, self.prefix, self.config.num_lanes)

    def _plan_rows(self) -> list[Row]:
        rows = one_token_rows(self)
        rows += prompt_chunks(self, planned=len(rows))
        if not rows and self.num_running and self.preempt_one():
            return self._plan_rows()
        return rows

    def preempt_one(self) -> bool:
        """Frees KV under pressure: a padding lane, else a live one recomputed later (never the last)."""
        victim, num_live = pick_victim(self.lanes, self.policy, self.view)
        if victim is None or (not victim.padding and num_live <= 1):
            return False
        request, padding = victim.request, victim.padding
        self._release_lane(victim)
        if padding:
            return True
        log.info("preempting request %d (KV budget %d spent)", request.request_id, self.kv_budget)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
        return True

    # -- folding results back -----------------------------------------------------------------

    def update(self, plan: StepPlan, result: StepResult, now: float) -> StepOutcome:
        if not plan.rows:
            # A plan that only released or cached sequences: nothing to fold back but a refused cache.
            apply_refusals(self, result)
            return StepOutcome(self._take_outputs())
        self.num_steps += 1
        tally = StepTally(self.lanes)
        apply_refusals(self, result)
        self.service.record_step(plan.rows, result, self.config.agent_weights)
        for request_id, error in result.errors.items():
            # A prefix op the engine could not apply fails its request even without a row.
            lane = self.lanes.of.get(request_id)
            if lane is not None and lane.is_live and all(r.request is not lane.request for r in plan.rows):
                self.finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, error)
        rows = [row for row in plan.rows if row.request.request_id not in result.refused]
        tally.count(rows, self.lanes.of)
        # Allocated once the rows are folded: nothing reads the budget meanwhile, and a lane that
        # ends frees what it holds, this step's tokens included.
        self.kv.allocate(sum(fold_row(self, row, result, now, tally) for row in rows))
        self._settle_padding()
        if __debug__:
            self.lanes.check()
            assert self.policy.pads(self.view) or not self.lanes.num_padding, "a lane pads after its batch ended"
        return StepOutcome(self._take_outputs(), self.stats.build(tally, self, now, result.duration_s))

    # -- lane and request endings -------------------------------------------------------------

    def finish_in_lane(self, lane: Lane, status: RequestStatus, now: float, error: str | None,
                        new_token=None) -> None:
        self._finish(lane.request, status, now, error, new_token)
        if status is not RequestStatus.FINISHED_ERROR and self.policy.pads(self.view):
            self.lanes.pad(lane)
        else:
            self._release_lane(lane, cache=True)

    def _finish(self, request: Request, status: RequestStatus, now: float, error: str | None,
                new_token=None) -> None:
        request.status = status
        request.error = error
        request.finished_time = now
        if self.service.left(request):
            self.forecast.idle(request.agent, now)
        self.stats.ended(request, now)
        tokens, text = ([new_token.token], new_token.text) if new_token else ([], "")
        self.outputs.append(
            (request, RequestOutput(request.request_id, tokens, text, True, status.finish_reason, error))
        )

    def _take_outputs(self) -> list[Delivery]:
        outputs, self.outputs = self.outputs, []
        return outputs

    def _release_lane(self, lane: Lane, cache: bool = False) -> None:
        """Frees the lane; a finished request's KV goes to the prefix cache when `cache` and reuse allow."""
        padded = lane.padding_tokens > 0
        request = self.lanes.vacate(lane)
        if request is None:
            return
        if cache and self.reuse_enabled and request.status in _CACHEABLE:
            self.prefix.keep(request, padded=padded)
        else:
            self.prefix.release(request)

    def _settle_padding(self) -> None:
        """Finished lanes pad only while the policy says so: a static batch ends with its last live sequence."""
        if not self.policy.pads(self.view):
            self._end_padding()

    def _end_padding(self) -> None:
        """A static batch ended: its finished lanes' KV goes to the prefix cache (or is released)."""
        if not self.lanes.num_padding:
            return
        for lane in self.lanes:
            if lane.padding:
                self._release_lane(lane, cache=True)

    def _fail_unfittable(self, now: float) -> None:
        for request in list(self.waiting):
            why = unfit_after_change(request, self.caps, self.kv_budget)
            if why is not None:
                self.waiting.remove(request)
                self._finish(request, RequestStatus.FINISHED_ERROR, now, why)
        for lane in self.lanes.live():
            why = unfit_after_change(lane.request, self.caps, self.kv_budget)
            if why is not None:
                self.finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, why)
