"""The agent-aware policies on the modeled card and a virtual clock: each must do its job, exactly."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import VirtualClock
from swarm_panel.runtime.core.request import RequestStatus
from swarm_panel.runtime.core.stats import LANE_STALLED
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.runtime.workloads.critical_path import NOISY, CriticalPathWorkload
from swarm_panel.runtime.workloads.critical_path_run import run_critical_path
from tests.helpers import Harness


def steps_until_served(policy: str) -> int:
    """A flooding agent queues 20 requests on 2 lanes, then a quiet agent asks once."""
    h = Harness(policy=policy, num_lanes=2)
    for _ in range(20):
        h.add(50, agent="flood")
    for _ in range(5):
        h.step()
    quiet = h.add(10, agent="quiet")
    arrived = len(h.steps)
    h.run()
    assert quiet.status is RequestStatus.FINISHED_LENGTH
    return sum(1 for s in h.steps[arrived:] if s.time <= quiet.first_token_time)


def test_an_agent_starved_under_fcfs_is_served_within_one_request_under_fair_share():
    # FCFS serves the 15 flood requests queued ahead first: over 7 requests per lane of 50 steps each.
    assert steps_until_served("continuous") > 300
    # Fair share gives it the next lane that frees: at most one flood request's 50 steps.
    assert steps_until_served("fair") <= 52


def test_fair_share_weights_give_an_agent_its_multiple_of_the_service():
    h = Harness(policy="fair", num_lanes=4, agent_weights={"heavy": 2.0})
    for _ in range(60):
        h.add(20, agent="heavy")
        h.add(20, agent="light")
    for _ in range(300):  # both agents stay backlogged throughout
        h.step()
    attained = h.scheduler.service.attained
    assert attained["heavy"] / attained["light"] == pytest.approx(2.0, rel=0.1)


def first_token_order(policy: str) -> list[str]:
    """Agents a, b, c have had 200, 40 and 0 tokens; then each queues one request, a first, on one lane."""
    h = Harness(policy=policy, num_lanes=1)
    h.add(200, agent="a")
    h.add(40, agent="b")
    h.run()
    blocker = h.add(30, agent="z")
    h.step()
    requests = [h.add(5, agent=agent) for agent in ("a", "b", "c")]
    h.run()
    assert blocker.finished_time < min(r.first_token_time for r in requests)
    return [r.agent for r in sorted(requests, key=lambda r: r.first_token_time)]


def test_least_attained_service_admits_the_least_served_session_first():
    assert first_token_order("continuous") == ["a", "b", "c"]
    assert first_token_order("las") == ["c", "b", "a"]


def test_priority_admits_by_request_priority_then_agent_priority():
    h = Harness(policy="priority", num_lanes=1, agent_priorities={"low": 5, "high": -1})
    h.add(30, agent="z")
    h.step()
    late = [h.add(5, agent=agent) for agent in ("low", "plain", "high")]
    urgent = h.add(5, agent="low")
    urgent.priority = -10
    h.run()
    order = sorted([*late, urgent], key=lambda r: r.first_token_time)
    assert order == [urgent, late[2], late[1], late[0]]


def kv_pressure(policy: str):
    """A 162-token KV budget cannot carry four lanes to their ends: 8-token prompts, 150 and 3 x 40 outputs.

    At 40 tokens each, 2 tokens are left for 4 lanes: two compute, two sit the step out; then none fit.
    """
    h = Harness(policy=policy, num_lanes=4, kv_capacity=162)
    h.add(100, agent="heavy")
    h.run()  # the heavy agent's session has been served; the others have had nothing
    requests = [h.add(150, agent="heavy"), *(h.add(40, agent=agent) for agent in ("b", "c", "d"))]
    paused: set[str] = set()
    computed: dict[int, int] = {}
    while h.scheduler.has_work:
        stats = h.step()
        for lane in h.scheduler.lanes:
            request = lane.request
            if request is None or not request.is_decoding:
                continue
            if stats is not None and stats.lanes[lane.index] == LANE_STALLED:
                paused.add(request.agent)
                # Paused, not preempted: its KV (everything computed) is still there.
                assert request.num_computed_tokens == computed.get(request.request_id)
            computed[request.request_id] = request.num_computed_tokens
    assert all(r.num_output_tokens == r.sampling.max_tokens for r in requests)
    return requests, paused


def test_under_kv_pressure_las_pauses_lanes_with_their_kv_and_gives_up_the_most_served_one():
    heavy, *light = kv_pressure("las")[0]
    paused = kv_pressure("las")[1]
    assert paused & {"b", "c", "d"}  # a light lane sat out steps and resumed without recomputing
    assert all(r.num_preemptions == 0 for r in light)
    assert heavy.num_preemptions == 1  # when nothing fit, the most-served session gave up its KV
    fcfs_heavy, *fcfs_light = kv_pressure("continuous")[0]
    assert fcfs_heavy.num_preemptions == 0 and sum(r.num_preemptions for r in fcfs_light) >= 1


def test_switching_between_all_six_policies_mid_run_loses_nothing():
    h = Harness(policy="continuous", num_lanes=4, agent_priorities={"agent-2": -1},
                agent_weights={"agent-1": 3.0})
    expected = {}
    for k in range(24):
        request = h.add(7 + 13 * (k % 5), agent=f"agent-{k % 4}")
        expected[request.request_id] = request.sampling.max_tokens
    order = [*POLICY_NAMES, *reversed(POLICY_NAMES)]
    served_before = 0
    for policy in order:
        for _ in range(15):
            h.step()
        h.reconfigure(policy=policy)
        served = sum(h.scheduler.service.attained.values())
        assert served >= served_before  # the service ledger survives the switch
        served_before = served
        assert h.scheduler.config.agent_priorities == {"agent-2": -1}
    h.run()
    for request_id, max_tokens in expected.items():
        outputs = h.outputs[request_id]
        assert sum(len(o.token_ids) for o in outputs) == max_tokens
        assert [o.finished for o in outputs].count(True) == 1 and outputs[-1].finish_reason == "length"
    assert not h.scheduler.waiting and h.scheduler.num_occupied_lanes == 0


@pytest.fixture(scope="module")
def critical_path_runs():
    workload = CriticalPathWorkload(rounds=2)
    return {policy: run_critical_path(ModeledEngine(), SchedulerConfig(policy=policy, num_lanes=8), workload,
                                      VirtualClock())
            for policy in ("continuous", "fair", "las")}


def test_least_attained_service_shortens_the_coordinators_makespan(critical_path_runs):
    fcfs, las = critical_path_runs["continuous"], critical_path_runs["las"]
    assert las.makespan_mean <= 0.8 * fcfs.makespan_mean
    assert las.tok_s >= 0.95 * fcfs.tok_s


def test_fair_share_holds_the_noisy_neighbour_to_its_share_and_cuts_the_others_latency(critical_path_runs):
    fcfs, fair = critical_path_runs["continuous"], critical_path_runs["fair"]
    assert fcfs.noisy_fair_ratio > 1.3
    assert fair.noisy_fair_ratio <= 1.2
    assert fair.others_latency_p95 <= 0.7 * fcfs.others_latency_p95
    assert fair.fairness["jain"] > fcfs.fairness["jain"]
    assert fair.tok_s >= 0.95 * fcfs.tok_s
    assert all(r["makespan"] > 0 and NOISY in r["share"] for r in fair.rounds)
