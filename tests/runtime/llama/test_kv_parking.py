"""Finished sequences parked in host RAM (swarm_panel.runtime.reuse.saved_states), on both architectures: out of the KV
cells while idle, back exactly when a later turn reuses them."""

from __future__ import annotations

import llama_cpp

from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.engine import LlamaEngine
from tests.runtime.llama.test_prefix_llama import (
    SYSTEM_TOKENS,
    check_live_kv,
    computed_fresh,
    finish,
    greedy,
    make_loop,
    system_text,
)


def _held_cells(engine: LlamaEngine) -> int:
    """KV cells in use over every sequence id the context has."""
    mem = llama_cpp.llama_get_memory(engine._context.ptr)
    return sum(llama_cpp.llama_memory_seq_pos_max(mem, s) + 1 for s in range(llama_cpp.llama_n_seq_max(engine._context.ptr)))


def _turns(engine: LlamaEngine, steps: list) -> tuple[Request, Request, int]:
    loop = make_loop(engine, steps)
    first = Request(engine.tokenizer.tokenize("You are a coding agent. Fix the failing parser test."), greedy(8), agent="a")
    loop.scheduler.add(first, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.step()
    idle_cells = _held_cells(engine)
    again = Request(first.token_ids + engine.tokenizer.tokenize(" The tool says: ok.", add_special=False), greedy(8), agent="a")
    loop.scheduler.add(again, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    finish(loop, engine)
    return first, again, idle_cells


def test_a_finished_sequence_waits_outside_the_kv_and_its_next_turn_resumes_exactly(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024, n_batch=128) as engine:
        steps: list = []
        first, again, idle_cells = _turns(engine, steps)
        assert engine.parks_cached
        # While the agent was away its conversation held no cell that a live sequence attends over.
        assert idle_cells == 0
        assert sum(s.prefix_hits for s in steps) == first.num_tokens - 1
        assert again.output_token_ids == computed_fresh(engine, again.prompt_token_ids, 8)
        assert engine.figures().parked_sequences == 0 and engine.figures().parked_bytes == 0


def test_resident_cached_sequences_hold_cells_while_idle(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024, n_batch=128, park_cached=False) as engine:
        first, again, idle_cells = _turns(engine, [])
        assert not engine.parks_cached
        assert idle_cells == first.num_tokens - 1
        assert again.output_token_ids == computed_fresh(engine, again.prompt_token_ids, 8)


def test_a_park_budget_too_small_recomputes_and_still_answers_exactly(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024, n_batch=128, park_budget_bytes=1) as engine:
        steps: list = []
        first, again, _ = _turns(engine, steps)
        assert sum(s.prefix_hits for s in steps) == 0
        assert engine.num_cached_sequences == 0
        assert again.output_token_ids == computed_fresh(engine, again.prompt_token_ids, 8)


def test_sequences_that_mostly_share_a_system_prompt_stay_resident(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024, n_batch=128) as engine:
        loop = make_loop(engine)
        system = engine.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
        agents = [Request(system + engine.tokenizer.tokenize(task, add_special=False), greedy(4), agent=task,
                          checkpoint_positions=(SYSTEM_TOKENS,)) for task in ("alpha", "zeta")]
        for request in agents:
            loop.scheduler.add(request, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        loop.step()
        # The second copied the first's system prompt (shared cells): parking either would free only
        # its few own cells, and a restore would copy all of them back.
        assert engine.num_cached_sequences == 2 and engine.figures().parked_sequences == 0
        assert [r.output_token_ids for r in agents] == [
            computed_fresh(engine, r.prompt_token_ids, 4) for r in agents]
        finish(loop, engine)


def test_the_kv_plot_and_metrics_show_parked_memory(tiny_model_path, qtbot):
    from swarm_panel.app.service.step_feed import StepFeed
    from swarm_panel.runtime.serving.metrics import MetricsAggregator
    from swarm_panel.ui.plots.live_plots import PlotsPanel

    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=1024, n_batch=128) as engine:
        metrics = MetricsAggregator()
        loop = make_loop(engine)
        loop.on_stats = metrics.observe
        first = Request(engine.tokenizer.tokenize("You are a coding agent. Fix the failing parser test."), greedy(8), agent="a")
        loop.scheduler.add(first, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        # Another agent's request steps while the first conversation waits parked.
        other = Request(engine.tokenizer.tokenize("Summarise the diff."), greedy(2), agent="b")
        loop.scheduler.add(other, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        snap = metrics.snapshot()
        assert snap.parked_sequences == 1 and snap.parked_bytes == engine.figures().parked_bytes > 0
        feed = StepFeed()
        feed.pull(metrics)
        feed.tick()
        panel = PlotsPanel()
        qtbot.addWidget(panel)
        panel.refresh(feed)
        budget = engine.figures().park_budget_bytes
        assert feed.latest("parked_pct") == 100.0 * snap.parked_bytes / budget
        _, y = panel.curves["parked_pct"].getData()
        assert y[-1] == feed.latest("parked_pct")
        assert f"parked {snap.parked_bytes / 1e6:,.1f} MB in host RAM" in panel.kv_summary
        finish(loop, engine)


def _four_agents_on_two_streams(split: LlamaEngine, steps: list,
                                **config) -> tuple[list[Request], list[Request], tuple]:
    """Four agents' first turns, then their second ones, on a split engine with two lanes."""
    loop = make_loop(split, steps, num_lanes=2, **config)
    scheduler = loop.scheduler
    firsts = [Request(split.tokenizer.tokenize(f"agent {i} reads the failing test and the parser it calls"), greedy(6),
                      agent=f"a{i}") for i in range(4)]
    for request in firsts:
        scheduler.add(request, loop.clock.now())
    while scheduler.has_work:
        loop.step()
    loop.step()
    snapshot = (scheduler.prefix_cache.num_resident, scheduler.prefix_cache.num_parked,
                split.figures().parked_sequences, split.figures().parked_bytes)
    agains = [Request(f.token_ids + split.tokenizer.tokenize(" The tool says: ok.", add_special=False), greedy(6), agent=f.agent)
              for f in firsts]
    for request in agains:
        scheduler.add(request, loop.clock.now())
    while scheduler.has_work:
        loop.step()
        check_live_kv(loop, split)
    finish(loop, split)
    return firsts, agains, snapshot


def test_split_kv_more_agents_than_lanes_resume_every_conversation_from_host_ram(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        assert split.parks_evicted and not split.parks_cached
        firsts, agains, (resident, parked, engine_parked, _) = _four_agents_on_two_streams(split, [])
        # Two streams, four conversations: the two evicted for the later agents' ids wait in host RAM.
        assert (resident, parked, engine_parked) == (2, 2, 2)
        # Every second turn resumed where its first ended, whether its sequence stayed or was parked.
        assert [a.num_cached_tokens for a in agains] == [f.num_tokens - 1 for f in firsts]
        assert [a.output_token_ids for a in agains] == [
            computed_fresh(split, a.prompt_token_ids, 6, num_lanes=2) for a in agains]
        assert split.figures().parked_sequences == 0 and split.lane_kv_positions() == [-1, -1]


def test_a_conversation_restored_from_host_ram_is_admitted_within_the_kv_budget(arch_model_path):
    # Room for about three of the four conversations: a restore brings its tokens back into the KV, so
    # admission must find cells for them as for a prompt (the scheduler asserts every plan fits).
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        firsts, agains, _ = _four_agents_on_two_streams(split, [], kv_budget=128)
        assert [a.num_cached_tokens for a in agains] == [f.num_tokens - 1 for f in firsts]
        assert [a.output_token_ids for a in agains] == [
            computed_fresh(split, a.prompt_token_ids, 6, num_lanes=2) for a in agains]


def test_split_kv_past_the_park_budget_the_oldest_parked_goes_and_its_turn_recomputes(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as roomy:
        two_states = _four_agents_on_two_streams(roomy, [])[2][3]
    # Room for one parked state of about that size, not two.
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False,
                     park_budget_bytes=two_states * 3 // 4) as split:
        firsts, agains, (resident, parked, engine_parked, parked_bytes) = _four_agents_on_two_streams(split, [])
        # The first agent's state was parked first, so it left when the second's came.
        assert (resident, parked, engine_parked) == (2, 1, 1) and parked_bytes <= two_states * 3 // 4
        # Its turn recomputes; so does any whose state a later park pushed out after the scheduler had
        # planned to restore it (the engine refuses that restore, and the turn starts over).
        assert agains[0].num_cached_tokens == 0
        assert [a.output_token_ids for a in agains] == [
            computed_fresh(split, a.prompt_token_ids, 6, num_lanes=2) for a in agains]


def test_the_cache_panel_names_the_conversations_parked_beside_the_streams(tiny_model_path, qtbot):
    from swarm_panel.runtime.serving.metrics import MetricsAggregator
    from swarm_panel.ui.panels.cache_panel import CachePanel

    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        metrics = MetricsAggregator()
        loop = make_loop(split, num_lanes=2)
        loop.on_stats = metrics.observe
        for i in range(4):
            loop.scheduler.add(Request(split.tokenizer.tokenize(f"agent {i} reads the failing test"), greedy(4), agent=f"a{i}"),
                               loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        snap = metrics.snapshot()
        panel = CachePanel(apply=lambda **_: None)
        qtbot.addWidget(panel)
        panel.update_from(snap)
        assert (snap.cached_sequences, snap.parked_sequences) == (2, 2)
        assert f"cached: 2 sequences, {snap.kv_cached:,} KV tokens" in panel.figures.text()
        assert f"2 parked in host RAM ({snap.parked_bytes / 1e6:,.1f} MB)" in panel.figures.text()
        finish(loop, split)


def test_split_kv_a_new_agent_copies_a_system_prompt_without_taking_another_agents_conversation(arch_model_path):
    with LlamaEngine(arch_model_path, max_lanes=2, n_ctx=1024, n_batch=256, kv_unified=False) as split:
        loop = make_loop(split, num_lanes=2)
        scheduler = loop.scheduler
        system = split.tokenizer.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]

        def turn(agent: str, tokens: list[int]) -> Request:
            request = Request(tokens, greedy(5), agent=agent, checkpoint_positions=(SYSTEM_TOKENS,))
            scheduler.add(request, loop.clock.now())
            return request

        def run() -> None:
            while scheduler.has_work:
                loop.step()
                check_live_kv(loop, split)

        firsts = [turn(f"a{i}", system + split.tokenizer.tokenize(f"task {i}: the parser", add_special=False)) for i in range(2)]
        run()
        # Two new agents on the same system prompt fill both lanes while both streams hold conversations:
        # each copies the system prompt, and the conversations wait in host RAM instead of being cut back.
        newcomers = [turn(f"b{i}", system + split.tokenizer.tokenize(f"other task {i}", add_special=False)) for i in range(2)]
        run()
        assert all(r.num_cached_tokens >= SYSTEM_TOKENS for r in newcomers)
        agains = [turn(f.agent, f.token_ids + split.tokenizer.tokenize(" The tool says: ok.", add_special=False))
                  for f in firsts]
        run()
        assert [a.num_cached_tokens for a in agains] == [f.num_tokens - 1 for f in firsts]
        finish(loop, split)
        assert [r.output_token_ids for r in newcomers + agains] == [
            computed_fresh(split, r.prompt_token_ids, 5, num_lanes=2) for r in newcomers + agains]
