"""Prefix reuse in the scheduler, driven with the modeled engine on a virtual clock."""

from __future__ import annotations

import random

import numpy as np
import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, PrefixOpKind, VirtualClock
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.reuse.prefix_cache import MIN_MATCH_TOKENS, PrefixCache, common_prefix_len
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.serving.metrics import MetricsAggregator
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import SwarmWorkload

SYSTEM = list(range(100, 140))  # 40 tokens every agent shares


class Recorder:
    """Wraps an engine and keeps every plan it was handed."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.plans = []
        for name in ("name", "kv_capacity", "max_context", "max_step_tokens", "max_lanes", "max_cached_sequences",
                     "piece", "caps"):
            setattr(self, name, getattr(engine, name))

    def step(self, plan):
        self.plans.append(plan)
        return self.engine.step(plan)


def make(kv_capacity: int | None = None, cached: int = 64, **config):
    engine = Recorder(ModeledEngine())
    scheduler = Scheduler(SchedulerConfig(**config),
                          EngineCaps(kv_capacity=kv_capacity or engine.kv_capacity, max_context=engine.max_context,
                                     max_step_tokens=engine.max_step_tokens, max_cached_sequences=cached))
    steps = []
    return scheduler, engine, EngineCore(scheduler, engine, VirtualClock(), on_stats=steps.append), steps


def request(tokens: list[int], max_tokens: int, agent: str = "a") -> Request:
    return Request(list(tokens), SamplingParams(max_tokens=max_tokens, ignore_eos=True), agent=agent)


def replay_ids(plan, held: set[int], pool: int) -> None:
    """Replays a plan on split KV's pool of sequence ids, in the order the engine applies it."""
    for released in plan.release:
        held.discard(released.request_id)
    for op in plan.prefix_ops:
        if op.kind is PrefixOpKind.ADOPT:
            held.discard(op.source.request_id)
        if op.kind is not PrefixOpKind.CACHE:
            held.add(op.dest.request_id)
            assert len(held) <= pool
    held.update(row.request.request_id for row in plan.rows)
    assert len(held) <= pool


def drain(loop: EngineCore, check=None) -> None:
    for _ in range(100_000):
        if not loop.scheduler.has_work:
            return
        loop.step()
        if check is not None:
            check()
    raise AssertionError("did not finish")


def test_common_prefix_and_lru_order():
    a = Request(list(range(20)))
    b = Request(list(range(10)) + [999] * 10)
    assert common_prefix_len(np.array([0, 1, 2]), np.array([0, 1, 3])) == 2
    assert common_prefix_len(np.array([0, 1]), np.array([0, 1, 3])) == 2
    cache = PrefixCache(2)
    assert cache.insert(a, 20) == [] and cache.insert(b, 20) == []
    match = cache.longest_match(np.arange(30), limit=29)
    assert match.source.handle is a and match.num_tokens == 20
    cache.touch(cache.get(a))
    evicted = cache.insert(Request(list(range(50, 70))), 20)
    assert [e.handle for e in evicted] == [b]  # b was the least recently used
    assert cache.num_tokens == 40
    assert cache.insert(Request([1] * 5), MIN_MATCH_TOKENS - 1) == [] and len(cache) == 2


def test_next_turn_adopts_and_a_shared_system_prompt_is_copied_with_exact_hits():
    scheduler, engine, loop, steps = make(prefill_chunk=512)
    first = request(SYSTEM + [1] * 10, 5, agent="a")
    scheduler.add(first, 0.0)
    drain(loop)
    assert scheduler.kv_cached == first.num_tokens - 1 and len(scheduler.prefix_cache) == 1
    # Another agent with the same system prompt: copies those 40 tokens, the entry stays.
    other = request(SYSTEM + [2] * 10, 5, agent="b")
    # The first agent's next turn: its whole previous conversation plus a tool result.
    again = request(first.token_ids + [3] * 7, 5, agent="a")
    scheduler.add(other, loop.clock.now())
    drain(loop)
    scheduler.add(again, loop.clock.now())
    drain(loop)
    ops = [op for plan in engine.plans for op in plan.prefix_ops if op.kind is not PrefixOpKind.CACHE]
    assert [(op.kind, op.source, op.dest, op.num_tokens) for op in ops] == [
        (PrefixOpKind.COPY, first, other, 40),
        (PrefixOpKind.ADOPT, first, again, first.num_tokens - 1),
    ]
    assert sum(s.prefix_queries for s in steps) == first.num_prompt_tokens + other.num_prompt_tokens + \
        again.num_prompt_tokens
    assert sum(s.prefix_hits for s in steps) == 40 + first.num_tokens - 1
    assert sum(s.prefill_tokens for s in steps) == first.num_prompt_tokens + 10 + 8
    metrics = MetricsAggregator()
    for s in steps:
        metrics.observe(s)
    snap = metrics.snapshot()
    assert snap.prefix_cache_hits == 40 + first.num_tokens - 1
    assert snap.prefix_cache_queries == first.num_prompt_tokens + other.num_prompt_tokens + again.num_prompt_tokens
    per_agent = {a.agent: (a.prefix_queries, a.prefix_hits) for a in snap.agents}
    assert per_agent["b"] == (other.num_prompt_tokens, 40)
    assert per_agent["a"] == (first.num_prompt_tokens + again.num_prompt_tokens, first.num_tokens - 1)
    for r in (first, other, again):
        assert r.status is RequestStatus.FINISHED_LENGTH and r.num_output_tokens == 5


def test_agents_arriving_together_share_the_system_prompt_being_computed():
    scheduler, engine, loop, steps = make(prefill_chunk=32, num_lanes=4)
    requests = [request(SYSTEM + [10 + i] * 8, 3, agent=f"a{i}") for i in range(4)]
    for r in requests:
        scheduler.add(r, 0.0)
    drain(loop)
    # The first computes the system prompt; the others copy it from its live sequence.
    assert sum(s.prefill_tokens for s in steps) == 48 + 3 * 8
    assert sum(s.prefix_hits for s in steps) == 3 * 40


def test_multi_turn_swarm_reuse_cuts_prompt_tokens_computed_by_over_80_percent():
    workload = SwarmWorkload(agents=8, lengths=(5, 11, 19, 28, 38, 60, 81, 112), requests_per_agent=6,
                             system_tokens=1000, conversation=True)
    on = run_closed_loop(ModeledEngine(), SchedulerConfig(num_lanes=8), workload, VirtualClock())
    off = run_closed_loop(ModeledEngine(), SchedulerConfig(num_lanes=8, prefix_cache=False), workload, VirtualClock())
    assert on.useful_tokens == off.useful_tokens == workload.total_output_tokens
    assert on.prompt_tokens == off.prompt_tokens == off.prefill_tokens
    assert on.prefill_tokens <= 0.2 * off.prefill_tokens
    assert on.prefix_hits == on.prompt_tokens - on.prefill_tokens
    assert on.tok_s > off.tok_s and on.ttft_p50 < off.ttft_p50
    assert off.prefix_queries == 0 and not off.prefix_cache


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
def test_eviction_under_kv_pressure_never_touches_a_live_sequence(policy):
    rng = random.Random(5)
    scheduler, engine, loop, steps = make(kv_capacity=900, cached=16, policy=policy, num_lanes=4, prefill_chunk=64)
    histories = {agent: SYSTEM + [200 + agent] * 5 for agent in range(6)}
    requests = []
    for turn in range(4):
        batch = []
        for agent in range(6):
            r = request(histories[agent] + [300 + turn] * rng.randint(1, 20), rng.randint(1, 40), agent=f"a{agent}")
            batch.append(r)
            scheduler.add(r, loop.clock.now())

        def check():
            live = {lane.request.request_id for lane in scheduler.lanes if lane.is_live}
            plan = engine.plans[-1]
            for released in plan.release:
                # A live request is released only when preempted, and then it is back in the queue.
                assert released.request_id not in live
                assert released.is_finished or released in scheduler.waiting
            assert scheduler.kv_used + scheduler.kv_cached <= scheduler.kv_budget

        drain(loop, check)
        for agent, r in enumerate(batch):
            histories[agent] = r.token_ids
        requests += batch
    assert sum(s.prefix_hits for s in steps) > 0
    evicted = {r.request_id for plan in engine.plans for r in plan.release if r.status is RequestStatus.FINISHED_LENGTH}
    assert evicted, "the budget should have forced evictions"
    for r in requests:
        assert r.status is RequestStatus.FINISHED_LENGTH and r.num_output_tokens == r.sampling.max_tokens


def test_turning_reuse_off_drops_the_cache_and_computes_everything():
    scheduler, engine, loop, steps = make()
    first = request(SYSTEM + [1] * 10, 5)
    scheduler.add(first, 0.0)
    drain(loop)
    assert scheduler.kv_cached > 0
    scheduler.reconfigure(scheduler.config.with_changes(prefix_cache=False), loop.clock.now())
    assert scheduler.kv_cached == 0
    again = request(first.token_ids + [2] * 4, 3)
    scheduler.add(again, loop.clock.now())
    seen = len(engine.plans)
    drain(loop)
    assert first in engine.plans[seen].release
    computed = sum(len(row.tokens) for plan in engine.plans[seen:] for row in plan.rows
                   if row.request is again and row.kind.name == "PREFILL")
    assert computed == again.num_prompt_tokens
    assert all(not plan.prefix_ops for plan in engine.plans[seen:])
    assert again.num_output_tokens == 3 and scheduler.kv_cached == 0


def test_an_aborted_request_is_cached_for_its_resend_and_a_failed_one_released():
    scheduler, engine, loop, steps = make()
    aborted = request(SYSTEM + [1] * 10, 50)
    scheduler.add(aborted, 0.0)
    loop.step()
    loop.step()
    computed = aborted.num_computed_tokens
    scheduler.abort(aborted.request_id, loop.clock.now())
    assert scheduler.prefix_cache.get(aborted) is not None
    resent = request(SYSTEM + [1] * 10, 2)
    scheduler.add(resent, loop.clock.now())
    drain(loop)
    assert resent.num_cached_tokens == min(computed, resent.num_prompt_tokens - 1)
    failed = request([9] * 30, 50)
    scheduler.add(failed, loop.clock.now())
    loop.step()
    scheduler.abort(failed.request_id, loop.clock.now(), error="the engine failed")
    drain(loop)
    assert scheduler.prefix_cache.get(failed) is None
    assert any(failed in plan.release for plan in engine.plans)


def test_naive_static_caches_finished_lanes_when_the_batch_ends():
    scheduler, engine, loop, steps = make(policy="naive", num_lanes=2)
    short, long = request(SYSTEM + [1] * 10, 2), request(SYSTEM + [2] * 10, 20)
    for r in (short, long):
        scheduler.add(r, 0.0)
    loop.step()
    loop.step()
    loop.step()
    assert short.is_finished and scheduler.prefix_cache.get(short) is None  # still riding as padding
    drain(loop)
    entry = scheduler.prefix_cache.get(short)
    assert entry is not None and entry.num_tokens == short.num_tokens - 1  # padding positions are not cached
    assert not any(op.kind is PrefixOpKind.CACHE for plan in engine.plans for op in plan.prefix_ops)
    # The CACHE ops ride with the next plan the engine runs.
    seen = len(engine.plans)
    scheduler.add(request([7] * 12, 1), loop.clock.now())
    for _ in range(100):
        if loop.step() is None:
            loop.clock.advance(0.01)
        if len(engine.plans) > seen:
            break
    cache_ops = [(op.kind, op.source, op.num_tokens) for op in engine.plans[seen].prefix_ops]
    assert cache_ops == [(PrefixOpKind.CACHE, short, short.num_tokens - 1),
                         (PrefixOpKind.CACHE, long, long.num_tokens - 1)]


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
@pytest.mark.parametrize("engine_ids", [4, 8])
@pytest.mark.parametrize("copies", [True, False])
def test_split_kv_reuse_stays_within_its_pool_of_sequences(policy, engine_ids, copies):
    """llama.cpp's split KV: live plus cached sequences share the ids, held within the width (4) even
    where the engine has more, so the ids in use stay consecutive; a copy's destination needs an id
    beside its source's, an adoption takes the source's."""
    rng = random.Random(11)
    engine = Recorder(ModeledEngine())
    scheduler = Scheduler(SchedulerConfig(policy=policy, num_lanes=4, prefill_chunk=64),
                          EngineCaps(kv_capacity=engine.kv_capacity, max_context=engine.max_context,
                                     max_step_tokens=engine.max_step_tokens, max_cached_sequences=engine_ids,
                                     max_sequences=engine_ids, copies_prefixes=copies, consecutive_ids=True))
    steps = []
    loop = EngineCore(scheduler, engine, VirtualClock(), on_stats=steps.append)
    # Half the agents share nothing with anyone, so their first turns need ids of their own.
    histories = {agent: (SYSTEM if agent % 2 else [400 + agent] * 12) + [200 + agent] * 5 for agent in range(6)}
    held: set[int] = set()

    def check():
        plan = engine.plans[-1]
        assert copies or all(op.kind is not PrefixOpKind.COPY for op in plan.prefix_ops)
        replay_ids(plan, held, pool=4)

    requests = []
    for turn in range(4):
        batch = [request(histories[a] + [300 + turn] * rng.randint(1, 20), rng.randint(1, 40), agent=f"a{a}")
                 for a in range(6)]
        for r in batch:
            scheduler.add(r, loop.clock.now())
        drain(loop, check)
        for agent, r in enumerate(batch):
            histories[agent] = r.token_ids
        requests += batch
    assert all(r.status is RequestStatus.FINISHED_LENGTH and r.num_output_tokens == r.sampling.max_tokens
               for r in requests)
    assert sum(s.prefix_hits for s in steps) > 0
    kinds = {op.kind for plan in engine.plans for op in plan.prefix_ops}
    assert PrefixOpKind.ADOPT in kinds and (PrefixOpKind.COPY in kinds) == copies


def test_split_kv_copies_no_prefix_when_lanes_yet_to_start_need_every_id_left():
    """Four lanes of four ids: a newcomer that shares a cached prefix, beside three that share nothing,
    adopts it. A copy would keep the source's id while the three still need theirs, and the source
    cannot be evicted in the step that copies it."""
    engine = Recorder(ModeledEngine())
    scheduler = Scheduler(SchedulerConfig(policy="continuous", num_lanes=4, prefill_chunk=256),
                          EngineCaps(kv_capacity=engine.kv_capacity, max_context=engine.max_context,
                                     max_step_tokens=engine.max_step_tokens, max_cached_sequences=4,
                                     max_sequences=4, copies_prefixes=True, consecutive_ids=True))
    loop = EngineCore(scheduler, engine, VirtualClock())
    held: set[int] = set()

    def check():
        replay_ids(engine.plans[-1], held, pool=4)

    scheduler.add(request(SYSTEM + [1] * 5, 3, agent="first"), loop.clock.now())
    drain(loop, check)
    for i, tokens in enumerate([SYSTEM + [2] * 5, [500] * 20, [600] * 20, [700] * 20]):
        scheduler.add(request(tokens, 3, agent=f"b{i}"), loop.clock.now())
    drain(loop, check)
    assert [op.kind for plan in engine.plans for op in plan.prefix_ops if op.kind is not PrefixOpKind.CACHE] == \
        [PrefixOpKind.ADOPT]


def test_the_cache_keeps_at_most_one_finished_sequence_per_lane_of_width():
    # Idle cached cells still cost attention in llama.cpp's unified KV: they stay within the width.
    scheduler, engine, loop, steps = make(cached=64, num_lanes=3)
    sizes = []
    for i in range(10):
        scheduler.add(request([500 + i] * 12 + [1, 2, 3], 4, agent=f"a{i}"), loop.clock.now())
        drain(loop, lambda: sizes.append(len(scheduler.prefix_cache)))
    assert max(sizes) == 3
    scheduler.reconfigure(scheduler.config.with_changes(num_lanes=2), loop.clock.now())
    scheduler.add(request([900] * 12, 4, agent="late"), loop.clock.now())
    drain(loop)
    assert len(scheduler.prefix_cache) == 2


def test_a_resent_conversation_counts_only_its_new_turn_when_prompts_are_ordered():
    scheduler, engine, loop, steps = make(policy="continuous", num_lanes=4, prefill_chunk=64)
    first = request([400] * 200, 5, agent="resender")
    scheduler.add(first, loop.clock.now())
    drain(loop)
    fresh = request([700] * 100, 5, agent="fresh")
    scheduler.add(fresh, loop.clock.now())
    again = request(first.token_ids + [401] * 10, 5, agent="resender")
    scheduler.add(again, loop.clock.now())
    loop.step()
    # 215 tokens of which the cache holds 204: it has less left than the fresh 100 admitted before it.
    assert again.num_cached_tokens == 204 and again.num_output_tokens == 1
    assert fresh.num_computed_tokens == 64 - 11
    drain(loop)
    assert again.num_output_tokens == 5 and fresh.num_output_tokens == 5
