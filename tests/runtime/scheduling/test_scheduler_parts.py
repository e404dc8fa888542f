"""The scheduler's parts on their own: the engine's caps, the KV budget, what calls hand back, the
invariants, and policies that decide without touching the scheduler."""

from __future__ import annotations

import dataclasses

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.fit import StepLine
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.core.step_outcome import StepOutcome
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B
from swarm_panel.runtime.policies.policy import Admission
from swarm_panel.runtime.policies.registry import AGENT_POLICY_NAMES, POLICY_NAMES, predicted_tok_s
from swarm_panel.runtime.reuse.prefix_cache import PrefixCache
from swarm_panel.runtime.scheduling.lanes import KVBudget
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from tests.helpers import Harness


def test_an_engine_publishes_its_caps_and_the_scheduler_is_sized_by_them():
    engine = ModeledEngine(RX_9070_XT_QWEN35_9B, max_lanes=16, max_step_tokens=512, max_cached_sequences=5)
    caps = engine.caps
    assert (caps.kv_capacity, caps.max_context, caps.max_step_tokens, caps.max_lanes, caps.max_cached_sequences) == \
        (engine.kv_capacity, engine.max_context, 512, 16, 5)
    assert caps.checkpoints is engine.checkpoints is not None
    assert caps.sequence_state_tokens == engine.sequence_state_tokens > 0
    assert caps.turn_end_tokens == engine.turn_end_tokens
    scheduler = Scheduler.for_engine(SchedulerConfig(num_lanes=16), engine)
    assert scheduler.caps == caps and scheduler.kv_budget == engine.kv_capacity
    assert scheduler.prefix_cache.max_entries == 5 and scheduler.prefix.resumption is not None
    with pytest.raises(ValueError, match="exceeds the engine's 16 lanes"):
        Scheduler.for_engine(SchedulerConfig(num_lanes=17), engine)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.kv_capacity = 1


def test_the_kv_budget_counts_what_lanes_hold_and_what_the_cache_keeps():
    cache = PrefixCache(4)
    kv = KVBudget(capacity=100, state_tokens=3, cache=cache)
    kv.allocate(40)
    assert kv.free_tokens == 60 and kv.can_admit(50, promised=10) and not kv.can_admit(51, promised=10)
    finished = Request(list(range(20)), SamplingParams(max_tokens=1))
    cache.insert(finished, 20)
    assert kv.cached == 20 + 3 and kv.free_tokens == 100 - 40 - 23
    kv.limit = 50
    assert kv.total == 50 and kv.free_tokens == 50 - 40 - 23
    kv.free(40)
    assert kv.used == 0


def test_parked_entries_hold_no_kv_and_the_oldest_leave_past_their_count():
    cache = PrefixCache(2, max_parked=2)
    kv = KVBudget(capacity=100, state_tokens=3, cache=cache)
    finished = [Request(list(range(i, i + 20)), SamplingParams(max_tokens=1)) for i in range(4)]
    for request in finished[:2]:
        assert cache.insert(request, 20) == []
    evicted = cache.insert(finished[2], 20)
    assert [e.handle for e in evicted] == [finished[0]] and cache.num_resident == 2
    assert cache.add_parked(evicted[0]) == [] and kv.cached == 2 * (20 + 3) and len(cache) == 3
    cache.add_parked(cache.pop_evictable())
    assert cache.insert(finished[3], 20) == []
    oldest = cache.add_parked(cache.pop_evictable())
    # Three parked beside room for two: the one parked first leaves; none of them holds KV.
    assert [e.handle for e in oldest] == [finished[0]] and (cache.num_resident, cache.num_parked) == (1, 2)
    assert kv.cached == 20 + 3 and cache.num_tokens == 20


def test_a_parked_conversation_is_admitted_only_where_its_restored_tokens_fit():
    from swarm_panel.runtime.scheduling.lanes import LaneTable, fill_free_lanes

    cache = PrefixCache(2, max_parked=2)
    kv = KVBudget(capacity=40, state_tokens=0, cache=cache)
    earlier = Request(list(range(50)), SamplingParams(max_tokens=1))
    cache.insert(earlier, 50)
    entry = cache.pop_evictable()
    cache.add_parked(entry)

    class Planner:
        def adoptable(self, request):
            return entry

        def evict_one(self, keep=None):
            return False

    # 60 prompt tokens whose first 50 come back from host RAM: they need cells, which 40 are not.
    waiting = __import__("collections").deque([Request(list(range(60)), SamplingParams(max_tokens=1))])
    lanes = LaneTable(2, kv)
    fill_free_lanes(waiting, lanes, kv, Planner(), width=2)
    assert len(waiting) == 1 and not lanes.of
    kv.capacity = 61
    fill_free_lanes(waiting, lanes, kv, Planner(), width=2)
    assert not waiting and len(lanes.of) == 1


def test_update_returns_the_steps_outputs_and_record_and_keeps_nothing_back():
    h = Harness(policy="continuous", num_lanes=2)
    first, second = h.add(3), h.add(1)
    plan = h.scheduler.schedule(h.clock.now())
    outcome = h.scheduler.update(plan, h.engine.step(plan), h.clock.now())
    assert isinstance(outcome, StepOutcome) and isinstance(outcome.stats, StepStats)
    assert outcome.stats.index == 1 and outcome.stats.useful_tokens == 2
    by_request = {request.request_id: output for request, output in outcome.outputs}
    assert set(by_request) == {first.request_id, second.request_id}
    assert not by_request[first.request_id].finished
    assert by_request[second.request_id].finish_reason == "length"
    # Nothing was stashed: the next call hands back only what it did itself.
    ended = h.scheduler.abort(first.request_id, h.clock.now())
    assert [(request, output.finish_reason) for request, output in ended] == [(first, "abort")]
    plan = h.scheduler.schedule(h.clock.now())
    assert h.scheduler.update(plan, h.engine.step(plan), h.clock.now()).outputs == []


def test_a_plan_that_only_releases_folds_back_without_a_record():
    h = Harness(policy="continuous", num_lanes=1, prefix_cache=False)
    request = h.add(1, prompt=12)
    h.step()
    assert request.status is RequestStatus.FINISHED_LENGTH
    plan = h.scheduler.schedule(h.clock.now())
    assert not plan.rows and plan.release == [request]
    assert h.scheduler.update(plan, h.engine.step(plan), h.clock.now()) == StepOutcome([], None)


def test_a_kv_counter_that_drifts_from_its_lanes_fails_the_step():
    h = Harness(policy="continuous", num_lanes=2)
    h.add(5)
    h.step()
    h.scheduler.kv.used += 1
    with pytest.raises(AssertionError, match="KV counter"):
        h.step()


def test_a_lane_map_entry_no_lane_holds_fails_the_step():
    h = Harness(policy="continuous", num_lanes=2)
    request = h.add(5)
    h.step()
    h.scheduler.lanes.of[request.request_id + 1000] = h.scheduler.lanes.of[request.request_id]
    with pytest.raises(AssertionError, match="lane map"):
        h.step()


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_policy_decides_from_its_view_and_changes_nothing(policy):
    h = Harness(policy=policy, num_lanes=2, agent_priorities={"late": -1})
    h.add(5, agent="flood")
    h.run()
    requests = [h.add(5, agent="flood") for _ in range(3)] + [h.add(5, agent="late")]
    h.clock.advance(1.0)
    scheduler = h.scheduler
    before = list(scheduler.waiting)
    admission = scheduler.policy.admit(scheduler.view, h.clock.now())
    assert isinstance(admission, Admission) and admission.enter
    assert list(scheduler.waiting) == before and scheduler.num_occupied_lanes == 0
    if admission.order is not None:
        assert sorted(r.request_id for r in admission.order) == [r.request_id for r in requests]
    if policy in AGENT_POLICY_NAMES:
        # Every agent-aware order puts the request of the agent that has had nothing ahead of the flood's.
        assert admission.order.index(requests[-1]) < admission.order.index(requests[1])
    assert not scheduler.policy.pads(scheduler.view)


def test_naive_static_pads_finished_lanes_only_while_its_batch_runs():
    h = Harness(policy="naive", num_lanes=2)
    short, long = h.add(1), h.add(4)
    h.step()
    assert short.is_finished and h.scheduler.policy.pads(h.scheduler.view)
    assert h.scheduler.lanes.num_padding == 1
    h.run()
    assert long.is_finished and not h.scheduler.policy.pads(h.scheduler.view)
    assert h.scheduler.lanes.num_padding == 0


def test_the_engine_running_out_of_kv_preempts_the_policys_victim_and_fails_only_a_last_lane():
    h = Harness(policy="priority", num_lanes=2, agent_priorities={"low": 5})
    low = h.add(50, agent="low")
    h.step()
    high = h.add(50, agent="high")
    h.step()
    # The low-priority request was admitted first; the policy's victim is still it, not the newest lane.
    assert h.scheduler.handle_kv_full(h.clock.now()) == []
    assert low.status is RequestStatus.WAITING and low.num_preemptions == 1
    assert high.status is RequestStatus.RUNNING
    h.scheduler.abort(low.request_id, h.clock.now())
    ended = h.scheduler.handle_kv_full(h.clock.now())
    assert [(request, output.finish_reason) for request, output in ended] == [(high, "error")]
    assert "ran out of KV" in high.error


def test_the_fit_asks_each_policy_for_its_prediction():
    line = StepLine(floor_ms=20.0, per_row_ms=2.0, points=0)
    rounds = [[10, 20, 30, 40], [40, 40, 40, 40]]
    continuous = 4 / (20.0 + 8.0) * 1e3
    assert predicted_tok_s("continuous", rounds, line) == pytest.approx(continuous)
    # The agent-aware policies are continuous batching with an order over agents.
    assert all(predicted_tok_s(name, rounds, line) == pytest.approx(continuous) for name in AGENT_POLICY_NAMES)
    useful = 100 + 160
    assert predicted_tok_s("naive", rounds, line) == pytest.approx(useful / ((40 + 40) * 28.0 / 1e3))
    shrinking_ms = 10 * 28.0 + 10 * 26.0 + 10 * 24.0 + 10 * 22.0 + 40 * 28.0
    assert predicted_tok_s("shrinking", rounds, line) == pytest.approx(useful / (shrinking_ms / 1e3))


def test_caps_defaults_describe_an_engine_without_prefix_reuse():
    caps = EngineCaps(kv_capacity=64, max_context=32)
    scheduler = Scheduler(SchedulerConfig(num_lanes=2), caps)
    assert not scheduler.reuse_enabled and scheduler.prefix.resumption is None and scheduler.kv_budget == 64
