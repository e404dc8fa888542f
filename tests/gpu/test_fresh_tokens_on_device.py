"""Greedy tokens on the device follow a fresh computation on the same device: 1, 8 and 32 agents over two turns
behind one system prompt, on both architectures and both KV layouts, every optimisation on (continuous batching,
chunked prompts, prefix reuse, overlap); each request against itself computed alone, reusing nothing. A token may
differ from the fresh computation's only at a near-tie there (tests/fresh_tokens.py, docs/gpu.md).
"""

from __future__ import annotations

import logging

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text, tool_text
from tests import fresh_tokens
from tests.fresh_tokens import RIVALS, assert_fresh, fresh, logprob_shifts, near_ties

# 32 agents take many minutes on a software device: a card runs them (`-m gpu`), CI's lane (`-m "gpu and not
# slow"`) runs 1 and 8.
pytestmark = pytest.mark.gpu

log = logging.getLogger(__name__)

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


def two_turns(engine: LlamaEngine, agents: int, logprobs: int | None = None) -> tuple[list[Request], list[Request]]:
    """Each agent's first turn behind one system prompt, then its next turn on its whole conversation."""
    def greedy(n: int) -> SamplingParams:
        return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, logprobs=logprobs)

    system = engine.tokenizer.tokenize(system_text(SYSTEM))[:SYSTEM]
    first = [Request(system + engine.tokenizer.tokenize(f"agent {a}: fix the parser", add_special=False),
                     greedy(4 + a % 3), agent=f"agent-{a}") for a in range(agents)]
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
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in first + turns), [r.error for r in first + turns]
    assert sum(r.num_cached_tokens for r in turns) > 0, "no turn reused its conversation: the test has no teeth"
    return first, turns


@pytest.mark.parametrize("agents", [1, 8, pytest.param(32, marks=pytest.mark.slow)])
def test_every_agents_turns_equal_a_fresh_computation(engine, agents):
    first, turns = two_turns(engine, agents)
    ties = {request.agent: assert_fresh(engine, request, request.agent) for request in first + turns}
    log.info("near-ties at %d agents: %s", agents, {agent: t for agent, t in ties.items() if t})
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes, "KV left behind"


def within_rounding(engine: LlamaEngine, prompt: list[int], request: Request) -> float:
    """The largest shift of the request's own logprobs against a fresh computation of `prompt` then its tokens."""
    shift = max(logprob_shifts(engine, prompt, request.output_token_ids, request.output_logprobs))
    assert shift <= fresh_tokens.NEAR_TIE, f"{request.agent}: its logprobs moved {shift:.3f} nats against each other"
    return shift


@pytest.mark.parametrize("agents", [8, pytest.param(32, marks=pytest.mark.slow)])
def test_every_agents_logprobs_are_a_fresh_computations_but_for_rounding(engine, agents):
    """What the near-tie tolerance rests on: batched, each position's logprobs move against a fresh computation's
    by at most NEAR_TIE, so a greedy token can part from the fresh one only where that one's best lie closer. A
    wrong state or another conversation moves them by nats."""
    first, turns = two_turns(engine, agents, logprobs=RIVALS)
    shifts = [within_rounding(engine, r.prompt_token_ids, r) for r in first + turns]
    log.info("largest logprob shift at %d agents: %.3f", agents, max(shifts))
    # Teeth: a turn's logprobs against a fresh computation of its conversation without the tool result.
    with pytest.raises(AssertionError):
        within_rounding(engine, first[-1].prompt_token_ids, turns[-1])


def test_a_token_far_below_the_best_is_not_taken_for_a_near_tie(engine):
    prompt = engine.tokenizer.tokenize(system_text(SYSTEM))[:SYSTEM]
    best = fresh(engine, prompt, 1, logprobs=RIVALS).output_logprobs[0]
    # The 20th best token: what a wrong state or another conversation's choice looks like from here.
    far, _, logprob = best.top[-1]
    assert best.logprob - logprob > fresh_tokens.NEAR_TIE, "the model's logits are too flat for this check"
    with pytest.raises(AssertionError, match="nats below the best"):
        near_ties(engine, prompt, [far], "agent-wrong")
