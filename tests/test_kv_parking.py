"""Finished sequences parked in host RAM (runtime.kv_parking), on both architectures: out of the KV
cells while idle, back exactly when a later turn reuses them."""

from __future__ import annotations

import llama_cpp

from runtime.llama_engine import LlamaEngine
from runtime.request import Request
from tests.test_prefix_llama import SYSTEM_TOKENS, computed_fresh, finish, greedy, make_loop, system_text


def _held_cells(engine: LlamaEngine) -> int:
    """KV cells in use over every sequence id the context has."""
    mem = llama_cpp.llama_get_memory(engine._ctx)
    return sum(llama_cpp.llama_memory_seq_pos_max(mem, s) + 1 for s in range(llama_cpp.llama_n_seq_max(engine._ctx)))


def _turns(engine: LlamaEngine, steps: list) -> tuple[Request, Request, int]:
    loop = make_loop(engine, steps)
    first = Request(engine.tokenize("You are a coding agent. Fix the failing parser test."), greedy(8), agent="a")
    loop.scheduler.add(first, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.step()
    idle_cells = _held_cells(engine)
    again = Request(first.token_ids + engine.tokenize(" The tool says: ok.", add_special=False), greedy(8), agent="a")
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
        assert engine.describe()["parked_sequences"] == 0 and engine.describe()["parked_bytes"] == 0


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
        system = engine.tokenize(system_text(SYSTEM_TOKENS))[:SYSTEM_TOKENS]
        agents = [Request(system + engine.tokenize(task, add_special=False), greedy(4), agent=task,
                          checkpoint_positions=(SYSTEM_TOKENS,)) for task in ("alpha", "zeta")]
        for request in agents:
            loop.scheduler.add(request, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        loop.step()
        # The second copied the first's system prompt (shared cells): parking either would free only
        # its few own cells, and a restore would copy all of them back.
        assert engine.num_cached_sequences == 2 and engine.describe()["parked_sequences"] == 0
        assert [r.output_token_ids for r in agents] == [
            computed_fresh(engine, r.prompt_token_ids, 4) for r in agents]
        finish(loop, engine)


def test_the_kv_plot_and_metrics_show_parked_memory(tiny_model_path, qtbot):
    from runtime.metrics import MetricsAggregator
    from ui.plots import PlotsPanel
    from ui.step_feed import StepFeed

    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=1024, n_batch=128) as engine:
        metrics = MetricsAggregator()
        loop = make_loop(engine)
        loop.on_stats = metrics.observe
        first = Request(engine.tokenize("You are a coding agent. Fix the failing parser test."), greedy(8), agent="a")
        loop.scheduler.add(first, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        # Another agent's request steps while the first conversation waits parked.
        other = Request(engine.tokenize("Summarise the diff."), greedy(2), agent="b")
        loop.scheduler.add(other, loop.clock.now())
        while loop.scheduler.has_work:
            loop.step()
        snap = metrics.snapshot()
        assert snap.parked_sequences == 1 and snap.parked_bytes == engine.describe()["parked_bytes"] > 0
        feed = StepFeed()
        feed.pull(metrics)
        feed.tick()
        panel = PlotsPanel()
        qtbot.addWidget(panel)
        panel.refresh(feed)
        budget = engine.describe()["park_budget_bytes"]
        assert feed.latest("parked_pct") == 100.0 * snap.parked_bytes / budget
        _, y = panel.curves["parked_pct"].getData()
        assert y[-1] == feed.latest("parked_pct")
        assert f"parked {snap.parked_bytes / 1e6:,.1f} MB in host RAM" in panel.kv_text.toPlainText()
        finish(loop, engine)
