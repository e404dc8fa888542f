"""The scheduler driving the real llama.cpp engine on the tiny model."""

from __future__ import annotations

import random

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, RealClock
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.lanes import ContextExceeded, settle
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore

PROMPTS = ["the agent can call a tool", "hello world", "what is this", "we will do it", "how are you",
           "from all of that", "if you can", "about the model"]


@pytest.fixture(scope="module")
def engine(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=2048, n_batch=256) as eng:
        yield eng


def make_loop(engine, **config) -> EngineCore:
    scheduler = Scheduler(SchedulerConfig(**config),
                          EngineCaps(kv_capacity=engine.kv_capacity, max_context=engine.max_context,
                                     max_step_tokens=engine.max_step_tokens, max_lanes=engine.max_lanes))
    return EngineCore(scheduler, engine, RealClock())


def drain(loop: EngineCore, switch_every: int = 0, rng: random.Random | None = None) -> None:
    step = 0
    while loop.scheduler.has_work:
        if switch_every and step % switch_every == 0:
            loop.scheduler.reconfigure(
                loop.scheduler.config.with_changes(policy=rng.choice(["naive", "shrinking", "continuous"]),
                                                   num_lanes=rng.randint(1, 8), prefill_chunk=rng.randint(1, 64)),
                loop.clock.now())
        if loop.step() is None and loop.scheduler.waiting and not loop.scheduler.num_running:
            loop.clock.wait_until(loop.scheduler.next_admission_time())
        step += 1


def greedy_request(engine, prompt: str, n: int) -> Request:
    return Request(engine.tokenizer.tokenize(prompt), SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))


def assert_no_leaks(loop: EngineCore, engine) -> None:
    assert loop.scheduler.kv_used == 0 and not loop.scheduler.has_work
    loop.step()  # hands any pending releases to the engine
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes


@pytest.fixture(scope="module")
def solo_outputs(engine):
    outputs = {}
    for prompt in PROMPTS:
        loop = make_loop(engine, policy="continuous", num_lanes=1)
        request = greedy_request(engine, prompt, 16)
        loop.scheduler.add(request, loop.clock.now())
        drain(loop)
        outputs[prompt] = request.output_token_ids
    return outputs


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
def test_greedy_tokens_in_a_batch_of_8_equal_each_alone(engine, solo_outputs, policy):
    loop = make_loop(engine, policy=policy, num_lanes=8, prefill_chunk=16)
    requests = [greedy_request(engine, p, 16) for p in PROMPTS]
    for r in requests:
        loop.scheduler.add(r, loop.clock.now())
    drain(loop)
    # Tiny-model logits move by at most 8e-4 when batched, far below its smallest top-2 gap here.
    assert {p: r.output_token_ids for p, r in zip(PROMPTS, requests)} == solo_outputs
    assert_no_leaks(loop, engine)


def test_switching_policy_mid_run_with_the_real_engine_loses_nothing(engine):
    rng = random.Random(3)
    loop = make_loop(engine, policy="naive", num_lanes=8)
    requests = [greedy_request(engine, PROMPTS[i % 8], rng.randint(1, 40)) for i in range(40)]
    for r in requests:
        loop.scheduler.add(r, loop.clock.now())
    drain(loop, switch_every=5, rng=rng)
    assert all(r.status is RequestStatus.FINISHED_LENGTH and r.num_output_tokens == r.sampling.max_tokens
               for r in requests)
    assert_no_leaks(loop, engine)


def test_a_cancelled_request_frees_its_kv(engine):
    loop = make_loop(engine, policy="continuous", num_lanes=4)
    keep, cancel = greedy_request(engine, PROMPTS[0], 30), greedy_request(engine, PROMPTS[1], 1000)
    for r in (keep, cancel):
        loop.scheduler.add(r, loop.clock.now())
    for _ in range(5):
        loop.step()
    assert sum(p >= 0 for p in engine.lane_kv_positions()) == 2
    loop.scheduler.abort(cancel.request_id, loop.clock.now())
    loop.step()
    assert sum(p >= 0 for p in engine.lane_kv_positions()) == 1
    drain(loop)
    assert cancel.status is RequestStatus.FINISHED_ABORTED and keep.num_output_tokens == 30
    assert_no_leaks(loop, engine)


def test_the_engine_publishes_its_caps_and_a_scheduler_is_sized_by_them(engine):
    caps = engine.caps
    assert (caps.max_context, caps.max_step_tokens, caps.max_lanes) == (2048, 256, 8)
    # Hybrid models resume only at checkpoints; attention models at any prefix.
    assert (caps.checkpoints is None) == (engine.memory_kind == "attention")
    assert caps.copies_prefixes and caps.consecutive_ids != engine.kv_unified and caps.turn_end_tokens
    scheduler = Scheduler.for_engine(SchedulerConfig(num_lanes=8), engine)
    assert scheduler.kv_budget == engine.kv_capacity and scheduler.prefix_cache.max_entries == caps.max_cached_sequences


def test_a_prompt_longer_than_the_context_fails_with_a_clear_error(engine):
    too_long = engine.tokenizer.tokenize("hello world " * 2000)
    with pytest.raises(ContextExceeded, match="the context holds 2048"):
        settle(engine.caps, engine.kv_capacity, len(too_long), 4)


@pytest.mark.slow
def test_no_sequence_or_kv_leaks_after_500_requests(engine):
    rng = random.Random(11)
    loop = make_loop(engine, policy="continuous", num_lanes=8, prefill_chunk=64)
    requests = [greedy_request(engine, PROMPTS[i % 8], rng.randint(1, 6)) for i in range(500)]
    for i, r in enumerate(requests):
        loop.scheduler.add(r, loop.clock.now())
        if i % 50 == 49:
            loop.scheduler.abort(r.request_id, loop.clock.now())
    drain(loop)
    assert sum(r.status is RequestStatus.FINISHED_LENGTH for r in requests) == 490
    assert all(r.is_finished for r in requests)
    assert_no_leaks(loop, engine)


def test_a_closed_loop_run_leaves_no_cached_sequence_in_the_engine(engine):
    from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
    from swarm_panel.runtime.workloads.workload import SwarmWorkload

    result = run_closed_loop(engine, SchedulerConfig(policy="continuous", num_lanes=4),
                             SwarmWorkload(agents=4, lengths=(3, 5), requests_per_agent=3, prompt_tokens=12),
                             RealClock())
    assert result.requests == 12
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes
    assert all(p == -1 for p in engine.cached_kv_positions())


def test_split_kv_gives_each_lane_its_share_and_the_same_greedy_tokens(arch_model_path, solo_outputs):
    with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=2048, n_batch=256, kv_unified=False) as split:
        assert split.max_context == 2048 // 8 and split.kv_capacity == 2048
        assert split.max_cached_sequences == split.max_sequences == 8 and split.caps.consecutive_ids
        assert split.facts.kv_unified is False
        loop = make_loop(split, policy="continuous", num_lanes=8, prefill_chunk=16)
        requests = [greedy_request(split, p, 16) for p in PROMPTS]
        for r in requests:
            loop.scheduler.add(r, loop.clock.now())
        drain(loop)
        assert {p: r.output_token_ids for p, r in zip(PROMPTS, requests)} == solo_outputs
        with pytest.raises(ContextExceeded, match="the context holds 256"):
            settle(split.caps, split.kv_capacity, greedy_request(split, "hello world " * 200, 4).num_prompt_tokens, 4)
        assert_no_leaks(loop, split)
