"""Prefix reuse on the real llama.cpp engine with the tiny model: same tokens, less prefill."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind, RealClock, Row, RowKind, StepPlan
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.workload import system_text, tool_text

SYSTEM_TOKENS = 60


@pytest.fixture(scope="module", params=["unified", "resident", "split"])
def shared_engine(arch_model_path, request):
    # Split KV has one stream per id: a copy between streams goes through host RAM.
    # Unified KV parks finished sequences in host RAM where that frees cells; "resident" never parks.
    unified = request.param != "split"
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=2048 if unified else 4096, n_batch=256,
                     cache_slots=6 if unified else 4, kv_unified=unified,
                     park_cached=request.param == "unified") as eng:
        yield eng


@pytest.fixture
def engine(shared_engine):
    engine = shared_engine
    yield engine
    assert engine.lane_kv_positions() == [-1] * engine.max_lanes, "a test left live KV behind"
    assert engine.cached_kv_positions() == [-1] * engine.max_cached_sequences, "a test left cached KV behind"


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def make_loop(engine, steps: list | None = None, **config) -> EngineCore:
    scheduler = Scheduler.for_engine(SchedulerConfig(**{"num_lanes": 4, **config}), engine)
    return EngineCore(scheduler, engine, RealClock(), on_stats=None if steps is None else steps.append)


def finish(loop: EngineCore, engine) -> None:
    """Drops the cache and hands the releases to the engine, so the next test starts empty."""
    assert not loop.scheduler.has_work
    loop.scheduler.drop_prefix_cache()
    loop.step()
    assert loop.scheduler.kv_used == loop.scheduler.kv_cached == 0


def computed_fresh(engine, prompt: list[int], max_tokens: int, num_lanes: int = 4) -> list[int]:
    """The greedy output of `prompt` computed from scratch, reuse off, leaving no KV behind."""
    loop = make_loop(engine, num_lanes=num_lanes, prefix_cache=False)
    fresh = Request(list(prompt), greedy(max_tokens))
    loop.scheduler.add(fresh, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.step()
    return fresh.output_token_ids


def check_live_kv(loop: EngineCore, engine) -> None:
    """Every live sequence holds exactly the KV the scheduler accounts for it."""
    for lane in loop.scheduler.lanes:
        if lane.request is None:
            continue
        engine_lane = engine._sequences.lanes.get(lane.request.request_id)
        if engine_lane is None:
            assert lane.kv_tokens == lane.request.num_computed_tokens == 0 or not lane.prefix_checked
            continue
        held = engine.lane_kv_positions()[engine_lane.seq_id] + 1
        assert held == lane.kv_tokens, f"request {lane.request.request_id}: KV {held}, accounted {lane.kv_tokens}"
    assert engine._context.memory.mismatches() == {}, "the engine's record of a sequence's end is not llama.cpp's"


def converse(engine, agents: int = 3, turns: int = 3, max_tokens: int = 10, check=False, **config):
    """Closed-loop agents whose every turn resends the whole conversation; returns outputs and step stats."""
    steps: list = []
    loop = make_loop(engine, steps, **config)
    scheduler = loop.scheduler
    system = engine.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
    histories = {a: system + engine.tokenizer.tokenize(f"task {a}: fix the parser", add_special=False) for a in range(agents)}
    outputs: dict[tuple[int, int], list[int]] = {}
    requests: list[Request] = []

    def submit(agent: int, turn: int) -> None:
        # The app marks where the shared system prompt ends, so a hybrid model checkpoints it for the others.
        request = Request(list(histories[agent]), greedy(max_tokens + agent), agent=f"agent-{agent}",
                          checkpoint_positions=(SYSTEM_TOKENS,))
        requests.append(request)

        def on_output(output) -> None:
            if output.finished:
                outputs[(agent, turn)] = request.output_token_ids
                tool = engine.tokenizer.tokenize(tool_text(agent, turn, 12), add_special=False)
                histories[agent] = request.token_ids + tool
                if turn + 1 < turns:
                    submit(agent, turn + 1)

        request.listener = on_output
        scheduler.add(request, loop.clock.now())

    for agent in range(agents):
        submit(agent, 0)
    while scheduler.has_work:
        loop.step()
        if check:
            check_live_kv(loop, engine)
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in requests)
    return outputs, steps, requests, loop


def test_greedy_tokens_with_reuse_equal_those_without(engine):
    plain, plain_steps, plain_requests, loop = converse(engine, prefix_cache=False)
    assert engine.num_cached_sequences == 0
    finish(loop, engine)
    reused, steps, requests, loop = converse(engine, check=True)
    finish(loop, engine)
    assert reused == plain
    prompt_tokens = sum(r.num_prompt_tokens for r in requests)
    # Reuse off computes every prompt token and looks nothing up.
    assert sum(s.prefill_tokens for s in plain_steps) == prompt_tokens
    assert sum(s.prefix_queries for s in plain_steps) == 0
    computed = sum(s.prefill_tokens for s in steps)
    assert computed + sum(s.prefix_hits for s in steps) == prompt_tokens
    assert computed < 0.5 * prompt_tokens


def test_eviction_under_kv_pressure_never_touches_a_live_sequence(engine):
    reference, _, _, loop = converse(engine, agents=4, prefix_cache=False)
    finish(loop, engine)
    # Room for the live conversations but not for every finished one as well.
    outputs, steps, requests, loop = converse(engine, agents=4, check=True, kv_budget=520, prefill_chunk=48)
    finish(loop, engine)
    assert outputs == reference
    assert max(s.kv_used + s.kv_cached for s in steps) <= 520
    assert sum(s.prefix_hits for s in steps) > 0
    assert loop.scheduler.num_evictions > 0


def test_hit_accounting_is_exact_and_the_next_turn_adopts_its_sequence(engine):
    steps: list = []
    loop = make_loop(engine, steps)
    system = engine.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
    first = Request(system + engine.tokenizer.tokenize("alpha beta", add_special=False), greedy(6), agent="a",
                    checkpoint_positions=(SYSTEM_TOKENS,))
    other = Request(system + engine.tokenizer.tokenize("zeta", add_special=False), greedy(6), agent="b",
                    checkpoint_positions=(SYSTEM_TOKENS,))
    assert first.token_ids[SYSTEM_TOKENS] != other.token_ids[SYSTEM_TOKENS]
    loop.scheduler.add(first, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.scheduler.add(other, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    assert sorted(p for p in engine.cached_kv_positions() if p >= 0) == [first.num_tokens - 2]
    again = Request(first.token_ids + engine.tokenizer.tokenize("tool says ok", add_special=False), greedy(6), agent="a")
    loop.scheduler.add(again, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    assert sum(s.prefix_queries for s in steps) == sum(r.num_prompt_tokens for r in (first, other, again))
    assert sum(s.prefix_hits for s in steps) == SYSTEM_TOKENS + first.num_tokens - 1
    assert {a: (q, h) for s in steps for a, q, h in s.prefix_agents if h} == {
        "b": (other.num_prompt_tokens, SYSTEM_TOKENS), "a": (again.num_prompt_tokens, first.num_tokens - 1)}
    # The copied and the adopted turns continue exactly as if they had computed their whole prompts.
    assert other.output_token_ids == computed_fresh(engine, other.prompt_token_ids, 6)
    assert again.output_token_ids == computed_fresh(engine, again.prompt_token_ids, 6)
    finish(loop, engine)


def test_a_request_whose_cached_prefix_was_evicted_after_admission_still_completes(engine):
    # Continuous would give the resent conversation, with less left to compute, the budget first.
    loop = make_loop(engine, num_lanes=2, prefill_chunk=16, policy="priority")
    scheduler = loop.scheduler
    system = engine.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
    first = Request(system + engine.tokenizer.tokenize("alpha", add_special=False), greedy(5), agent="a")
    scheduler.add(first, loop.clock.now())
    while scheduler.has_work:
        loop.step()
    entry = scheduler.prefix_cache.get(first)
    assert entry is not None
    # A long unrelated prompt of a higher priority is admitted first and takes the whole prefill
    # budget for a few steps.
    blocker = Request([engine.vocab.bos] + engine.tokenizer.tokenize("hello world " * 10, add_special=False), greedy(3),
                      priority=-1)
    again = Request(first.token_ids + engine.tokenizer.tokenize("tool ok", add_special=False), greedy(8), agent="a")
    scheduler.add(blocker, loop.clock.now())
    scheduler.add(again, loop.clock.now())
    loop.step()
    lane = scheduler.lanes.of[again.request_id]
    assert not lane.prefix_checked and again.num_computed_tokens == 0  # admitted, counting on the entry
    # The entry goes before the request's first chunk (here: reuse switched off and on again).
    scheduler.reconfigure(scheduler.config.with_changes(prefix_cache=False), loop.clock.now())
    scheduler.reconfigure(scheduler.config.with_changes(prefix_cache=True), loop.clock.now())
    assert scheduler.prefix_cache.get(first) is None
    while scheduler.has_work:
        loop.step()
        check_live_kv(loop, engine)
    assert again.status is RequestStatus.FINISHED_LENGTH and again.num_output_tokens == 8
    assert again.output_token_ids == computed_fresh(engine, again.prompt_token_ids, 8)
    finish(loop, engine)


def test_a_prefix_op_with_a_missing_source_fails_only_its_destination(engine):
    ghost = Request([1, 2, 3])
    victim = Request(engine.tokenizer.tokenize("hello world, what is this about the model"), greedy(2))
    good = Request(engine.tokenizer.tokenize("we will do it"), greedy(2))
    n = 4
    plan = StepPlan(
        rows=[Row(victim, RowKind.PREFILL, n, victim.token_ids[n:], True),
              Row(good, RowKind.PREFILL, 0, good.token_ids, True)],
        prefix_ops=[PrefixOp(PrefixOpKind.COPY, ghost, victim, n)],
    )
    result = engine.step(plan)
    assert "holds no KV" in result.errors[victim.request_id] and good.request_id in result.samples
    engine.step(StepPlan(release=[victim, good]))


def test_split_kv_next_turn_takes_over_its_own_stream(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        loop = make_loop(split, num_lanes=2)
        scheduler = loop.scheduler
        system = split.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
        first = Request(system + split.tokenizer.tokenize("alpha beta", add_special=False), greedy(6), agent="a")
        scheduler.add(first, loop.clock.now())
        loop.step()
        stream = split._sequences.lanes[first.request_id].seq_id
        while scheduler.has_work:
            loop.step()
        loop.step()
        assert split.cached_kv_positions() == [first.num_tokens - 2, -1]
        assert split.lane_kv_positions() == [-1, -1]
        again = Request(first.token_ids + split.tokenizer.tokenize("tool says ok", add_special=False), greedy(6), agent="a")
        scheduler.add(again, loop.clock.now())
        loop.step()
        assert split._sequences.lanes[again.request_id].seq_id == stream
        assert again.num_cached_tokens == first.num_tokens - 1
        while scheduler.has_work:
            loop.step()
            check_live_kv(loop, split)
        assert again.output_token_ids == computed_fresh(split, again.prompt_token_ids, 6, num_lanes=2)
        finish(loop, split)
        assert split.lane_kv_positions() == [-1, -1] and split.cached_kv_positions() == [-1, -1]


def test_split_kv_evicts_a_cached_stream_before_a_new_lane_needs_its_id(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        loop = make_loop(split, num_lanes=2)
        scheduler = loop.scheduler
        done = [Request(split.tokenizer.tokenize(f"agent {i} reads the failing test and the parser"), greedy(4), agent=f"a{i}")
                for i in range(2)]
        for request in done:
            scheduler.add(request, loop.clock.now())
        while scheduler.has_work:
            loop.step()
        loop.step()
        assert len(scheduler.prefix_cache) == 2 and all(p >= 0 for p in split.cached_kv_positions())
        # Both ids hold cached sequences; two unrelated prompts still get lanes and finish.
        fresh = [Request(split.tokenizer.tokenize(f"zeta {i} omega"), greedy(5)) for i in range(2)]
        for request in fresh:
            scheduler.add(request, loop.clock.now())
        while scheduler.has_work:
            loop.step()
            check_live_kv(loop, split)
        assert all(r.status is RequestStatus.FINISHED_LENGTH for r in fresh)
        assert scheduler.num_evictions >= 1
        finish(loop, split)
        assert split.lane_kv_positions() == [-1, -1] and split.cached_kv_positions() == [-1, -1]


def test_split_kv_copies_a_prefix_into_another_stream(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=3, n_ctx=1536, n_batch=256, kv_unified=False) as split:
        prompt = split.tokenizer.tokenize("hello world, what is this about the model and the parser")
        n = 6
        source = Request(list(prompt), greedy(2))
        # A hybrid model's state is copied through a checkpoint at n, as the scheduler marks one there.
        split.step(StepPlan(rows=[Row(source, RowKind.PREFILL, 0, prompt[:n], False, checkpoint=True)]))
        split.step(StepPlan(rows=[Row(source, RowKind.PREFILL, n, prompt[n:], True)]))
        tail = split.tokenizer.tokenize(" and then the tests", add_special=False)
        dest = Request(prompt[:n] + tail, greedy(2))
        result = split.step(StepPlan(rows=[Row(dest, RowKind.PREFILL, n, dest.token_ids[n:], True)],
                                     prefix_ops=[PrefixOp(PrefixOpKind.COPY, source, dest, n)]))
        assert not result.errors and not result.refused
        streams = {rid: lane.seq_id for rid, lane in split._sequences.lanes.items()}
        positions = split.lane_kv_positions()
        assert streams[source.request_id] != streams[dest.request_id]
        assert positions[streams[source.request_id]] == len(prompt) - 1
        assert positions[streams[dest.request_id]] == dest.num_tokens - 1
        assert split._context.memory.mismatches() == {}
        copied = result.samples[dest.request_id].token
        split.step(StepPlan(release=[source, dest]))
        fresh = Request(list(dest.token_ids), greedy(2))
        result = split.step(StepPlan(rows=[Row(fresh, RowKind.PREFILL, 0, fresh.token_ids, True)]))
        assert result.samples[fresh.request_id].token == copied
        split.step(StepPlan(release=[fresh]))
        assert split.lane_kv_positions() == [-1, -1, -1]


def test_split_kv_keeps_the_ids_in_use_within_the_width(arch_model_path):
    # More engine ids than lanes in use (as when the bench sweeps wider widths first): cached streams
    # must not push live lanes onto ids past a gap, which would cut every step into several ubatches.
    with LlamaEngine(arch_model_path, max_lanes=8, n_ctx=2048, n_batch=256, kv_unified=False) as split:
        used: set[int] = set()
        fill = split._runner._fill_batch

        def recording(rows):
            out = fill(rows)
            used.update(split._context.tokens.batch.seq_id[i][0] for i in range(split._context.tokens.batch.n_tokens))
            return out

        split._runner._fill_batch = recording
        loop = make_loop(split, num_lanes=4)
        requests = []
        for wave in range(4):
            # Prompts that share no prefix: every request needs an id of its own, none adopts.
            for lane in range(4):
                first = 20 + 40 * wave + 10 * lane
                request = Request(list(range(first, first + 10)), greedy(2 + 3 * lane))
                requests.append(request)
                loop.scheduler.add(request, loop.clock.now())
            while loop.scheduler.has_work:
                loop.step()
            assert len(loop.scheduler.prefix_cache) > 0
        assert all(r.status is RequestStatus.FINISHED_LENGTH for r in requests)
        assert used == {0, 1, 2, 3}
        finish(loop, split)
        assert split.lane_kv_positions() == [-1] * 8 and split.cached_kv_positions() == [-1] * 8
