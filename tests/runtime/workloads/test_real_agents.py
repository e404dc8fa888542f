"""Real-agents mode: multi-turn coding chats on the bundled model that end when the model stops."""

from __future__ import annotations

import asyncio
import os

import pytest

from swarm_panel.app.loadgen.swarm import SwarmConfig, _Swarm, run_swarm
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.model import default_threads
from swarm_panel.runtime.workloads.agent_script import SYSTEM_PROMPT, AgentConversation
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import SwarmWorkload
from tests.app.server.test_server_common import running, settings

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def test_a_conversation_grows_by_the_reply_and_a_tool_result():
    chat = AgentConversation(agent=2)
    assert [m["role"] for m in chat.messages] == ["system", "user"]
    assert chat.messages[0]["content"] == SYSTEM_PROMPT
    chat.replied("run_tests(\"tests\")")
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user"]
    assert chat.messages[2]["content"] == "run_tests(\"tests\")"
    assert chat.messages[3]["content"].startswith("Tool result:")
    assert chat.turn == 1
    # Agents begin on different tasks, so a round holds a mix of short and long work.
    assert len({AgentConversation(a).messages[1]["content"] for a in range(8)}) == 8


def test_an_agent_moves_on_to_a_new_task_after_its_turns():
    swarm = _Swarm(SwarmConfig(url="http://127.0.0.1:1", agents=1, seconds=1, real_agents=True, turns=2), None)
    first = swarm._messages(0, 0)
    swarm._replied(0, 0, "a")
    assert len(swarm._messages(0, 1)) == 4
    swarm._replied(0, 1, "b")
    third = swarm._messages(0, 2)
    assert len(third) == 2 and third[1]["content"] != first[1]["content"]
    body = swarm._body(0, 2)
    assert body["max_tokens"] == 256 and "ignore_eos" not in body


def test_the_default_threads_take_every_core_headless_and_leave_one_beside_the_panel():
    cores = len(os.sched_getaffinity(0))
    assert default_threads(0) == cores
    assert default_threads(0, leave_a_core=True) == max(1, cores - 1)


@pytest.mark.parametrize("leave_a_core", [False, True])
def test_the_panels_service_leaves_a_core_and_a_headless_one_does_not(tiny_model_path, leave_a_core):
    service = SwarmService(settings(engine="llama", model=tiny_model_path, n_ctx=512, num_lanes=2),
                           leave_a_core=leave_a_core)
    service.start()
    try:
        assert service.engine_thread.engine.n_threads == default_threads(0, leave_a_core)
    finally:
        service.stop()


def test_in_process_real_agents_stop_on_their_own_at_varied_lengths(real_model_path):
    from swarm_panel.app.service.engine_factory import resolve_model

    path, _ = resolve_model(None)
    engine = LlamaEngine(path, max_lanes=8, n_ctx=4096, n_threads=1)
    try:
        workload = SwarmWorkload(agents=4, requests_per_agent=2, real_agents=True, reply_tokens=128)
        result = run_closed_loop(engine, SchedulerConfig(policy="continuous", num_lanes=4), workload, RealClock())
    finally:
        engine.close()
    assert result.requests == 8 and result.errors == 0
    assert result.natural_stops >= 1
    assert result.length_min < result.length_max <= 128
    # The second turn resends the first: its prompt's prefix comes from the cache.
    assert result.prefix_hits > 0 and result.prefill_tokens < result.prompt_tokens


def test_real_agents_over_http_resend_their_conversation_and_reuse_it():
    service = SwarmService(settings(engine="llama", num_lanes=4, n_ctx=4096, threads=1))
    with running(service) as server:
        config = SwarmConfig(url=server.url, agents=3, real_agents=True, turns=2, reply_tokens=64)
        report = asyncio.run(run_swarm(config))
    assert report.requests == 6 and report.errors == 0, report.error_messages
    assert report.cached_tokens > 0
    lengths = {agent["tokens"] for agent in report.per_agent.values()}
    assert len(lengths) > 1
