"""Prefix reuse on a hybrid model (qwen35: Gated DeltaNet + attention): exact tokens, checkpoints, refusals.

A recurrent state has seen every token of its sequence: reusing part of a sequence must restore the
state from a checkpoint, or greedy tokens silently differ from a fresh computation (on a device: differ by more
than a near-tie, tests/fresh_tokens.py; tests/gpu collects this module again). The tiny qwen35
model is scaled so that a stale state shows up in greedy tokens.
"""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind, RealClock, Row, RowKind, StepPlan, engine_meta
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.reuse.prefix_cache import NEAR_TOKENS
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text, tool_text
from tests.fresh_tokens import assert_fresh, fresh

SYSTEM = 80


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module", params=["unified", "split"])
def hybrid(tiny_qwen35_model_path, request):
    unified = request.param == "unified"
    with LlamaEngine(tiny_qwen35_model_path, max_lanes=4, n_ctx=4096 if unified else 8192, n_batch=256,
                     kv_unified=unified) as eng:
        yield eng


@pytest.fixture
def engine(hybrid):
    yield hybrid
    assert hybrid.lane_kv_positions() == [-1] * hybrid.max_lanes, "a test left live KV behind"
    assert hybrid.cached_kv_positions() == [-1] * hybrid.max_cached_sequences, "a test left cached KV behind"
    hybrid.checkpoints.clear()


def make_loop(engine, **config) -> EngineCore:
    steps: list = []
    scheduler = Scheduler.for_engine(SchedulerConfig(**{"num_lanes": 4, **config}), engine)
    loop = EngineCore(scheduler, engine, RealClock(), on_stats=steps.append)
    loop.steps = steps
    return loop


def drain(loop: EngineCore) -> None:
    while loop.scheduler.has_work:
        if loop.step() is None and loop.scheduler.waiting and not loop.scheduler.num_running:
            loop.clock.wait_until(loop.scheduler.next_admission_time())
        assert loop.engine._context.memory.mismatches() == {}, "the engine's record of a sequence's end is not llama.cpp's"


def finish(loop: EngineCore) -> None:
    drain(loop)
    loop.scheduler.drop_prefix_cache()
    loop.step()


def system_prompt(engine) -> list[int]:
    return engine.tokenizer.tokenize(system_text(SYSTEM))[:SYSTEM]


def test_the_engine_knows_a_hybrid_and_publishes_its_checkpoints(engine, tiny_model_path):
    facts = engine_meta(engine)
    assert facts["memory_kind"] == "hybrid" and facts["checkpoints"] == 0 and facts["checkpoint_bytes"] == 0
    loop = make_loop(engine)
    request = Request(system_prompt(engine) + [300] * 20, greedy(3), checkpoint_positions=(SYSTEM,))
    loop.scheduler.add(request, loop.clock.now())
    drain(loop)
    facts = engine_meta(engine)
    # One at the system prompt's end, one at the prompt's end but its last token.
    assert facts["checkpoints"] == 2 and facts["checkpoint_bytes"] == 2 * facts["recurrent_state_bytes"] > 0
    assert loop.steps[-1].checkpoints == 2 and loop.steps[-1].checkpoint_bytes == facts["checkpoint_bytes"]
    finish(loop)
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=256, n_batch=64) as plain:
        assert plain.facts.memory_kind == "attention" and plain.checkpoints is None


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
def test_every_reuse_gives_the_tokens_of_a_fresh_computation(engine, policy):
    """Agents sharing a system prompt, exact repeats, and next turns resending the conversation."""
    loop = make_loop(engine, policy=policy, prefill_chunk=64)
    scheduler = loop.scheduler
    system = system_prompt(engine)
    first = [Request(system + engine.tokenizer.tokenize(f"task {a}: fix the parser", add_special=False), greedy(6 + a),
                     agent=f"agent-{a}", checkpoint_positions=(SYSTEM,)) for a in range(4)]
    for request in first:
        scheduler.add(request, loop.clock.now())
    drain(loop)
    repeats = [Request(list(r.prompt_token_ids), greedy(6 + a), agent=f"other-{a}") for a, r in enumerate(first)]
    turns = [Request(r.token_ids + engine.tokenizer.tokenize(tool_text(a, 0, 12), add_special=False), greedy(5),
                     agent=f"agent-{a}", checkpoint_positions=(SYSTEM,)) for a, r in enumerate(first)]
    for request in repeats + turns:
        scheduler.add(request, loop.clock.now())
    drain(loop)
    requests = first + repeats + turns
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in requests), [r.error for r in requests]
    reused = {r.request_id: r.num_cached_tokens for r in requests}
    finish(loop)
    for request in requests:
        assert_fresh(engine, request, f"request {request.request_id} reused {reused[request.request_id]} tokens")
    # Reuse happened everywhere it can: repeats resume one token short of their prompt, or at most
    # NEAR_TOKENS before that where the last chunk began that near its end (runtime.reuse.prefix_cache), next
    # turns at least at their previous prompt, the other agents at least at the system prompt (unified KV copies).
    assert all(r.num_cached_tokens >= max(r.num_prompt_tokens - 1 - NEAR_TOKENS, SYSTEM + 1)
               for r in repeats if engine.kv_unified)
    assert all(t.num_cached_tokens >= f.num_prompt_tokens - 1 for f, t in zip(first, turns))
    if engine.kv_unified and policy == "continuous":
        assert all(r.num_cached_tokens >= SYSTEM for r in first[1:])
    assert engine.checkpoints.num_restored > 0


def test_a_partial_reuse_without_a_checkpoint_is_refused_and_recomputed(engine):
    """The memory cannot cut a recurrent state back: the op is refused, the request starts over."""
    source = Request(system_prompt(engine) + [300] * 20, greedy(1))
    engine.step(StepPlan(rows=[Row(source, RowKind.PREFILL, 0, list(source.token_ids), True)]))
    engine.step(StepPlan(prefix_ops=[PrefixOp(PrefixOpKind.CACHE, source, None, source.num_tokens)]))
    dest = Request(source.token_ids[:SYSTEM] + [301] * 10, greedy(1))
    result = engine.step(StepPlan(rows=[Row(dest, RowKind.PREFILL, SYSTEM, dest.token_ids[SYSTEM:], True)],
                                  prefix_ops=[PrefixOp(PrefixOpKind.ADOPT, source, dest, SYSTEM)]))
    assert "no recurrent-state checkpoint" in result.refused[dest.request_id]
    assert not result.errors and not result.samples
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes
    again = engine.step(StepPlan(rows=[Row(dest, RowKind.PREFILL, 0, list(dest.token_ids), True)]))
    engine.step(StepPlan(release=[dest]))
    assert again.samples[dest.request_id].token == fresh(engine, dest.prompt_token_ids, 1).output_token_ids[0]


def test_a_refused_reuse_makes_the_scheduler_recompute_not_fail(engine):
    loop = make_loop(engine)
    system = system_prompt(engine)
    first = Request(system + [300] * 20, greedy(4), agent="a", checkpoint_positions=(SYSTEM,))
    loop.scheduler.add(first, loop.clock.now())
    drain(loop)
    # Checkpoints lost behind the scheduler's back (as an engine might): the planned resume is refused.
    engine.checkpoints.clear()
    repeat = Request(list(first.prompt_token_ids), greedy(4), agent="b")
    loop.scheduler.add(repeat, loop.clock.now())
    drain(loop)
    assert repeat.status is RequestStatus.FINISHED_LENGTH and repeat.error is None
    finish(loop)
    assert repeat.output_token_ids == first.output_token_ids == fresh(engine, first.prompt_token_ids, 4).output_token_ids


def test_a_small_checkpoint_budget_evicts_the_oldest_and_stays_exact(tiny_qwen35_model_path):
    with LlamaEngine(tiny_qwen35_model_path, max_lanes=4, n_ctx=4096, n_batch=256) as probe:
        loop = make_loop(probe)
        request = Request(system_prompt(probe) + [300] * 20, greedy(2))
        loop.scheduler.add(request, loop.clock.now())
        finish(loop)
        state = probe.figures().recurrent_state_bytes
    with LlamaEngine(tiny_qwen35_model_path, max_lanes=4, n_ctx=4096, n_batch=256,
                     checkpoint_budget_bytes=3 * state) as eng:
        loop = make_loop(eng)
        system = system_prompt(eng)
        requests = []
        for wave in range(3):
            batch = [Request(system + [300 + wave * 10 + a] * 20, greedy(4), agent=f"w{wave}a{a}",
                             checkpoint_positions=(SYSTEM,)) for a in range(4)]
            requests += batch
            for r in batch:
                loop.scheduler.add(r, loop.clock.now())
            drain(loop)
            assert eng.checkpoints.num_bytes <= 3 * state and max(s.checkpoint_bytes for s in loop.steps) <= 3 * state
        assert eng.checkpoints.num_evicted > 0
        finish(loop)
        for r in requests:
            assert_fresh(eng, r)
