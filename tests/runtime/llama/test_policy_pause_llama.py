"""A lane paused under KV pressure keeps its KV in llama.cpp and resumes with the same greedy tokens."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.core.stats import LANE_STALLED
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.closed_loop import exact_tokens

# (agent, output tokens): the heavy agent has been served before, so least-attained-service ranks it last.
JOBS = (("heavy", 150), ("b", 40), ("c", 40), ("d", 40))


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=1024, n_threads=1) as eng:
        yield eng


def run(engine, kv_budget: int | None) -> tuple[dict[str, list[int]], set[str], dict[str, int]]:
    """Greedy outputs per agent, the agents whose lane sat out a step, and preemptions per agent."""
    config = SchedulerConfig(policy="las", num_lanes=4, kv_budget=kv_budget, prefix_cache=False)
    loop = EngineCore(Scheduler.for_engine(config, engine), engine, RealClock())
    scheduler = loop.scheduler

    def submit(agent: str, n: int, k: int) -> Request:
        prompt = exact_tokens(engine, f"agent {agent} asks question {k} about the code", 8)
        request = Request(prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True), agent=agent)
        scheduler.add(request, loop.clock.now())
        return request

    submit("heavy", 100, 0)
    while scheduler.has_work:
        loop.step()
    requests = [submit(agent, n, 1) for agent, n in JOBS]
    paused: set[str] = set()
    computed: dict[int, int] = {}
    while scheduler.has_work:
        stats = loop.step()
        for lane in scheduler.lanes:
            request = lane.request
            if request is None or not request.is_decoding:
                continue
            if stats is not None and stats.lanes[lane.index] == LANE_STALLED:
                paused.add(request.agent)
                assert request.num_computed_tokens == computed[request.request_id]
            computed[request.request_id] = request.num_computed_tokens
    assert all(r.num_output_tokens == r.sampling.max_tokens for r in requests)
    loop.step()
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes
    return ({r.agent: r.output_token_ids for r in requests}, paused,
            {r.agent: r.num_preemptions for r in requests})


def test_a_paused_lane_keeps_its_kv_and_resumes_with_the_same_greedy_tokens(engine):
    reference, never_paused, _ = run(engine, kv_budget=None)
    assert not never_paused
    # 162 KV tokens: at 40 tokens each, four lanes find two tokens of room, so two of them sit a step out.
    outputs, paused, preemptions = run(engine, kv_budget=162)
    light = paused & {"b", "c", "d"}
    assert light, "no light lane was paused"
    for agent in light:
        assert preemptions[agent] == 0
        assert outputs[agent] == reference[agent]
