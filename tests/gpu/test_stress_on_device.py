"""A stress run on the device: 32 agents, several turns each behind a shared system prompt, on 8 lanes, policy
switched while they run. Nothing crashes, no agent gets another's reply (each turn's greedy tokens equal its
conversation computed alone, or near-ties there), and once idle the device holds no KV of a live request."""

from __future__ import annotations

import dataclasses

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text, tool_text
from tests.fresh_tokens import assert_fresh

# Minutes on a software device: run on a card (`-m gpu`), left out of CI's lane (`-m "gpu and not slow"`).
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

AGENTS, TURNS, LANES = 32, 3, 8
POLICIES = ("continuous", "fair", "naive", "continuous")


def test_32_agents_over_several_turns_finish_each_with_its_own_conversation(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=LANES, n_ctx=8192, n_batch=256, kv_unified=True) as engine:
        loop = EngineCore(Scheduler.for_engine(SchedulerConfig(num_lanes=LANES, prefill_chunk=64), engine),
                          engine, RealClock())
        system = engine.tokenizer.tokenize(system_text(64))[:64]
        history = {a: system + engine.tokenizer.tokenize(f"agent {a}: the parser fails", add_special=False)
                   for a in range(AGENTS)}
        done: list[Request] = []
        steps = 0
        for turn in range(TURNS):
            requests = {a: Request(list(history[a]), SamplingParams(max_tokens=3 + (a + turn) % 5, temperature=0.0,
                                                                   ignore_eos=True), agent=f"agent-{a}")
                        for a in range(AGENTS)}
            for request in requests.values():
                loop.scheduler.add(request, loop.clock.now())
            while loop.scheduler.has_work:
                loop.step()
                steps += 1
                if steps % 40 == 0:
                    config = dataclasses.replace(loop.scheduler.config, policy=POLICIES[(steps // 40) % len(POLICIES)])
                    loop.deliver(loop.scheduler.reconfigure(config, loop.clock.now()))
            loop.flush()
            for a, request in requests.items():
                assert request.status is RequestStatus.FINISHED_LENGTH, request.error
                history[a] = request.token_ids + engine.tokenizer.tokenize(tool_text(a, turn, 6), add_special=False)
            done += requests.values()
        assert engine.lane_kv_positions() == [-1] * engine.max_lanes, "a live lane kept KV after the run"
        loop.scheduler.drop_prefix_cache()
        loop.step()
        assert engine.cached_kv_positions() == [-1] * engine.max_cached_sequences
        # Every fourth agent's turns, against their conversations computed alone with reuse off: the same
        # tokens, or near-ties there (tests/fresh_tokens.py); another conversation's tokens are far below the best.
        for request in done:
            if int(request.agent.split("-")[1]) % 4 == 0:
                assert_fresh(engine, request, f"{request.agent}, turn of {request.num_prompt_tokens} tokens")
