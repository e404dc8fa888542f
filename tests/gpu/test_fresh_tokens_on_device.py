"""Greedy tokens on the device equal a fresh computation on the same device: 1, 8 and 32 agents over two turns
behind one system prompt, on both architectures and both KV layouts, every optimisation on (continuous batching,
chunked prompts, prefix reuse, overlap); each request against itself computed alone, reusing nothing."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, RequestStatus
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text, tool_text
from tests.runtime.llama.test_hybrid_reuse import greedy

# Minutes on a software device: run on a card (`-m gpu`), left out of CI's lane (`-m "gpu and not slow"`).
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

LANES = 8
SYSTEM = 48


@pytest.fixture(scope="module", params=["unified", "split"])
def engine(arch_model_path, request):
    unified = request.param == "unified"
    with LlamaEngine(arch_model_path, max_lanes=LANES, n_ctx=4096 if unified else 8192, n_batch=256,
                     kv_unified=unified) as eng:
        assert eng.computes_async
        yield eng


def run(engine: LlamaEngine, requests: list[Request], **config) -> EngineCore:
    loop = EngineCore(Scheduler.for_engine(SchedulerConfig(num_lanes=LANES, prefill_chunk=32, **config), engine),
                      engine, RealClock())
    for request in requests:
        loop.scheduler.add(request, loop.clock.now())
    while loop.scheduler.has_work:
        if loop.step() is None and loop.scheduler.waiting and not loop.scheduler.num_running:
            loop.clock.wait_until(loop.scheduler.next_admission_time())
    loop.flush()
    return loop


def fresh(engine: LlamaEngine, request: Request) -> list[int]:
    alone = Request(list(request.prompt_token_ids), request.sampling)
    loop = run(engine, [alone], prefix_cache=False)
    loop.scheduler.drop_prefix_cache()
    loop.step()
    return alone.output_token_ids


@pytest.mark.parametrize("agents", [1, 8, 32])
def test_every_agents_turns_equal_a_fresh_computation(engine, agents):
    system = engine.tokenizer.tokenize(system_text(SYSTEM))[:SYSTEM]
    first = [Request(system + engine.tokenizer.tokenize(f"agent {a}: fix the parser", add_special=False), greedy(4 + a % 3),
                     agent=f"agent-{a}") for a in range(agents)]
    loop = run(engine, first)
    turns = [Request(r.token_ids + engine.tokenizer.tokenize(tool_text(a, 0, 8), add_special=False), greedy(4),
                     agent=f"agent-{a}") for a, r in enumerate(first)]
    for request in turns:
        loop.scheduler.add(request, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.flush()
    loop.scheduler.drop_prefix_cache()
    loop.step()
    requests = first + turns
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in requests), [r.error for r in requests]
    assert sum(r.num_cached_tokens for r in turns) > 0, "no turn reused its conversation: the test has no teeth"
    for request in requests:
        assert request.output_token_ids == fresh(engine, request), \
            f"{request.agent} (reused {request.num_cached_tokens} tokens)"
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes, "KV left behind"
