"""A prompt resent after a hang-up resumes from what the first request computed, on both architectures.

Agents time out and resend (Claude Code after five quiet minutes, the OpenAI SDKs after their
timeout); a long prompt cut off mid-prefill must not be computed again from its first token, and
the resumed reply must be the one a fresh computation gives.
"""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, RequestStatus
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text
from tests.runtime.llama.test_hybrid_reuse import greedy

PROMPT = 400
CHUNK = 64


@pytest.fixture(scope="module", params=["unified", "split"])
def engine(arch_model_path, request):
    unified = request.param == "unified"
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=2048 if unified else 4096, n_batch=256,
                     kv_unified=unified) as eng:
        yield eng


def make_loop(engine, **config) -> EngineCore:
    scheduler = Scheduler.for_engine(SchedulerConfig(**{"num_lanes": 2, "prefill_chunk": CHUNK, **config}), engine)
    return EngineCore(scheduler, engine, RealClock())


def drain(loop: EngineCore) -> None:
    while loop.scheduler.has_work:
        loop.step()


def run(engine, prompt: list[int], n: int, **config) -> Request:
    loop = make_loop(engine, **config)
    request = Request(list(prompt), greedy(n))
    loop.scheduler.add(request, loop.clock.now())
    drain(loop)
    loop.scheduler.drop_prefix_cache()
    loop.step()
    return request


@pytest.mark.parametrize("cut", ["mid-prefill", "mid-decode"])
def test_a_resent_prompt_resumes_after_a_hang_up_with_the_fresh_tokens(engine, cut):
    prompt = engine.tokenizer.tokenize(system_text(PROMPT))[:PROMPT]
    expected = run(engine, prompt, 12, prefix_cache=False).output_token_ids
    loop = make_loop(engine)
    first = Request(list(prompt), greedy(12))
    loop.scheduler.add(first, loop.clock.now())
    until = (lambda: first.num_computed_tokens >= 3 * CHUNK) if cut == "mid-prefill" else \
        (lambda: first.num_output_tokens >= 4)
    while not until():
        loop.step()
    computed = first.num_computed_tokens
    assert computed < len(prompt) if cut == "mid-prefill" else computed > len(prompt)
    loop.scheduler.abort(first.request_id, loop.clock.now())
    assert first.status is RequestStatus.FINISHED_ABORTED
    again = Request(list(prompt), greedy(12))
    loop.scheduler.add(again, loop.clock.now())
    drain(loop)
    # A hybrid resumes only where its recurrent state (or a checkpoint) stands; the prompt's last
    # token is always computed anew, for its logits.
    assert again.num_cached_tokens >= min(computed, len(prompt) - 1) - CHUNK
    assert again.num_cached_tokens >= 2 * CHUNK
    assert again.output_token_ids == expected
    loop.scheduler.drop_prefix_cache()
    loop.step()
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes
