"""How a split-KV step's rows become llama_decode calls (swarm_panel.runtime.llama.cpu_tuning.followers),
without llama.cpp."""

from __future__ import annotations

import itertools
import random

import pytest

from swarm_panel.runtime.llama.cpu_tuning.followers import (
    PROBE,
    CallCoefficients,
    CallCost,
    RowSpan,
    padded_cells,
    plan_calls,
    ubatch_features,
)

STREAM = 4096
# Shaped like the 2-core CPU's fit on the demo model: a ubatch ~15 ms, a row 3 ms, a cell 3.3 us.
CPU = CallCoefficients(ubatch_ms=15.0, row_ms=3.0, cell_ms=0.0033)
# Shaped like a card: the weight stream dominates, a cell of KV is nearly free.
CARD = CallCoefficients(ubatch_ms=17.0, row_ms=0.15, cell_ms=0.00002)


def spans(*cells: int, first_id: int = 0, prompts: tuple[int, ...] = ()) -> list[RowSpan]:
    return [RowSpan(first_id + i, c, i in prompts) for i, c in enumerate(cells)]


def total_ms(rows: list[RowSpan], calls: list[list[int]], cost: CallCoefficients) -> float:
    """What llama.cpp's split of each call into consecutive-id ubatches costs under `cost`."""
    total = 0.0
    for call in calls:
        group = [rows[i] for i in call]
        assert [s.seq_id for s in group] == sorted(s.seq_id for s in group)
        run: list[RowSpan] = []
        for span in group + [None]:
            if run and (span is None or span.seq_id != run[-1].seq_id + 1):
                width = padded_cells(max(s.cells for s in run), STREAM)
                total += cost.segment_ms(len(run), width, sum(s.prompt for s in run))
                run = []
            if span is not None:
                run.append(span)
    return total


def every_cut(rows: list[RowSpan]):
    """Every way to cut the id-ordered rows into pieces, each piece its own call."""
    for mask in itertools.product((False, True), repeat=len(rows) - 1):
        calls, current = [], [0]
        for i, cut in enumerate(mask, start=1):
            if cut:
                calls.append(current)
                current = []
            current.append(i)
        yield calls + [current]


def test_rows_of_alike_contexts_stay_one_call():
    assert plan_calls(spans(200, 230, 180, 250, 210, 190, 240, 220), CPU, STREAM) == [list(range(8))]


def test_one_long_context_runs_apart_where_its_cells_cost_more_than_a_ubatch():
    rows = spans(200, 210, 220, 2000, 230, 240, 250, 205)
    calls = plan_calls(rows, CPU, STREAM)
    # The pieces beside the long row are not id-adjacent to each other, so they share a call.
    assert calls == [[0, 1, 2, 4, 5, 6, 7], [3]]
    assert total_ms(rows, calls, CPU) < total_ms(rows, [list(range(8))], CPU)


def test_on_a_card_where_cells_are_nearly_free_nothing_is_cut():
    assert plan_calls(spans(200, 210, 220, 2000, 230, 240, 250, 205), CARD, STREAM) == [list(range(8))]


def test_without_a_fit_nothing_is_cut():
    assert plan_calls(spans(200, 210, 3000, 205), None, STREAM) == [[0, 1, 2, 3]]


def test_a_prompt_row_at_the_edge_is_cut_out_at_no_ubatch_cost():
    # Its remaining tokens need a ubatch of their own anyway: alone, its first token joins them.
    rows = spans(200, 210, 220, 900, prompts=(3,))
    assert plan_calls(rows, CPU, STREAM) == [[0, 1, 2], [3]]


def test_gaps_in_the_ids_cut_for_free_and_pieces_across_a_gap_share_a_call():
    rows = [RowSpan(0, 200), RowSpan(1, 210), RowSpan(3, 2000), RowSpan(4, 2100)]
    assert plan_calls(rows, CPU, STREAM) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("seed", range(40))
def test_the_cut_is_the_cheapest_of_every_possible_cut(seed):
    rng = random.Random(seed)
    cost = CallCoefficients(rng.uniform(1, 30), rng.uniform(0.1, 5), rng.uniform(0.0005, 0.01))
    n = rng.randint(2, 9)
    rows = spans(*(rng.choice((50, 300, 700, 1500, 3000, 4000)) for _ in range(n)),
                 prompts=tuple(i for i in range(n) if rng.random() < 0.2))
    best = min(total_ms(rows, calls, cost) for calls in every_cut(rows))
    assert total_ms(rows, plan_calls(rows, cost, STREAM), cost) == pytest.approx(best)


def test_features_count_ubatches_as_llama_cpp_cuts_them():
    rows = [RowSpan(0, 100), RowSpan(1, 300), RowSpan(3, 1000), RowSpan(4, 5000)]
    # Runs {0, 1} and {3, 4}; a span is padded to 256 cells and capped at the stream.
    assert ubatch_features(rows, STREAM) == (2, 4, 2 * 512 + 2 * 4096)


def observed(cost: CallCost, truth: CallCoefficients, calls: list[tuple[int, int, int]], rng: random.Random) -> None:
    for u, r, x in calls:
        ms = u * truth.ubatch_ms + r * truth.row_ms + x * truth.cell_ms
        cost.observe(u, r, x, ms * rng.uniform(0.97, 1.03) / 1e3)


def test_the_fit_recovers_the_cost_of_a_ubatch_a_row_and_a_cell():
    rng = random.Random(1)
    cost = CallCost(max_saving_cells=7 * STREAM)
    calls = [(1, r, r * w) for r in (1, 3, 7, 8) for w in (256, 512, 2048)] * 8
    rng.shuffle(calls)
    observed(cost, CPU, calls, rng)
    fit = cost.coefficients
    assert fit is not None
    assert fit.ubatch_ms == pytest.approx(CPU.ubatch_ms, rel=0.15)
    assert fit.row_ms == pytest.approx(CPU.row_ms, rel=0.15)
    assert fit.cell_ms == pytest.approx(CPU.cell_ms, rel=0.15)
    assert cost.for_step() is fit


def test_calls_that_never_vary_their_rows_give_no_fit_and_steps_probe_now_and_then():
    rng = random.Random(2)
    cost = CallCost(max_saving_cells=7 * STREAM, probe_every=4)
    # Eight rows in one ubatch every time: a ubatch's cost cannot be told from a row's.
    observed(cost, CPU, [(1, 8, 8 * w) for w in (256, 512, 768, 1024)] * 30, rng)
    assert cost.coefficients is None
    assert [cost.for_step() for _ in range(8)] == [None, None, None, PROBE] * 2


def test_a_fit_that_says_a_ubatch_costs_nothing_is_no_fit():
    cost = CallCost(max_saving_cells=7 * STREAM)
    for i in range(96):
        rows = 1 + i % 8
        cost.observe(1 + i % 2, rows, rows * 256, (5.0 * rows - 3.0 * (1 + i % 2)) / 1e3)
    assert cost.coefficients is None


def test_on_a_card_a_cell_cost_lost_in_the_noise_still_fits_and_cuts_nothing():
    rng = random.Random(3)
    cost = CallCost(max_saving_cells=7 * STREAM)
    calls = [(1, r, r * w) for r in (1, 3, 7, 8) for w in (256, 512, 2048)] * 8
    rng.shuffle(calls)
    observed(cost, CARD, calls, rng)
    fit = cost.coefficients
    assert fit is not None and fit.ubatch_ms == pytest.approx(CARD.ubatch_ms, rel=0.15)
    assert plan_calls(spans(200, 210, 220, 4000, 230, 240, 250, 205), fit, STREAM) == [list(range(8))]


def test_a_fit_stays_until_a_newer_one_counts():
    rng = random.Random(4)
    cost = CallCost(max_saving_cells=7 * STREAM, window=96)
    observed(cost, CPU, [(1, r, r * w) for r in (1, 3, 7, 8) for w in (256, 512, 2048)] * 8, rng)
    assert cost.coefficients is not None
    # Calls that alone give no fit (always eight rows in one ubatch) fill the window: the last fit stays.
    observed(cost, CPU, [(1, 8, 8 * w) for w in (256, 512, 768)] * 64, rng)
    assert cost._fit() is None
    assert cost.coefficients.ubatch_ms == pytest.approx(CPU.ubatch_ms, rel=0.15)
