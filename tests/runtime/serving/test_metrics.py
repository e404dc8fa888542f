import statistics

import pytest

from swarm_panel.runtime.core.fit import StepLine, ceiling_tok_s, fit_step_line
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.serving.metrics import MetricsAggregator, percentile
from tests.helpers import Harness


def test_aggregator_figures_follow_the_step_records():
    h = Harness(policy="naive", num_lanes=4)
    for n, agent in ((10, "fast"), (40, "slow"), (40, "slow"), (40, "slow")):
        h.add(n, agent=agent)
    h.run()
    agg = MetricsAggregator(window_s=1e9)
    for s in h.steps:
        agg.observe(s)
    snap = agg.snapshot()
    assert snap.total_tokens == 130
    assert snap.total_requests == 4
    held = sum(s.width_held for s in h.steps)
    assert snap.utilization == pytest.approx(sum(s.useful_rows for s in h.steps) / held)
    assert snap.padding_share == pytest.approx(30 / held)
    span = h.steps[-1].time
    assert snap.tok_s == pytest.approx(130 / span)
    by_agent = {a.agent: a for a in snap.agents}
    assert by_agent["fast"].tokens == 10 and by_agent["slow"].tokens == 120
    assert by_agent["slow"].requests == 3
    assert by_agent["fast"].itl_p50 == pytest.approx(CARD.decode_step_ms(4) / 1e3, rel=0.05)
    assert snap.ttft_p50 is not None and snap.e2e_p95 >= snap.e2e_p50


def test_rolling_window_forgets_old_steps():
    h = Harness(policy="continuous", num_lanes=2)
    h.add(200)
    h.run()
    agg = MetricsAggregator(window_s=0.5)
    for s in h.steps:
        agg.observe(s)
    snap = agg.snapshot()
    assert snap.total_tokens == 200
    # 0.5 s of steps at about 19 ms each: the window holds a fraction of the run.
    assert snap.tok_s == pytest.approx(1e3 / CARD.step_ms(1, context_tokens=200), rel=0.1)


def test_step_line_fit_recovers_the_cost_model():
    points = [(b, CARD.decode_step_ms(b)) for b in (1, 2, 4, 8, 16) for _ in range(3)]
    line = fit_step_line(points)
    assert line.floor_ms == pytest.approx(CARD.floor_ms)
    assert line.per_row_ms == pytest.approx(CARD.per_row_ms)
    assert fit_step_line([(4, 1.0), (4, 2.0)]) is None
    # A width seen once or twice in passing does not make a line, nor does one that falls.
    assert fit_step_line([(8, 30.0)] * 50 + [(1, 100.0)] * 2) is None
    assert fit_step_line([(8, 30.0)] * 5 + [(1, 100.0)] * 5) is None
    # A sweep that measured each width at length reads a fall as flat within noise.
    flat = fit_step_line([(1, 10.2)] * 5 + [(2, 9.8)] * 5, flat_when_falling=True)
    assert flat.per_row_ms == 0 and flat.floor_ms == pytest.approx(10.0)


def test_the_ceiling_prefers_the_steps_measured_at_its_width():
    h = Harness(policy="continuous", num_lanes=4)
    for n in (30, 30, 30, 30):
        h.add(n)
    h.run()
    agg = MetricsAggregator(window_s=1e9)
    for s in h.steps:
        agg.observe(s)
    snap = agg.snapshot()
    full = [s.duration * 1e3 for s in h.steps if s.prefill_tokens == 0 and s.decode_rows + s.padding_lanes == 4]
    assert len(full) >= 3 and snap.step_ms_by_width[4] == pytest.approx(statistics.median(full))
    line = StepLine(floor_ms=10.0, per_row_ms=1.0, points=9)
    assert ceiling_tok_s(4, snap.step_ms_by_width, line) == pytest.approx(4e3 / snap.step_ms_by_width[4])
    assert ceiling_tok_s(2, {4: 5.0}, line) == pytest.approx(2e3 / 12.0)
    assert ceiling_tok_s(2, {}, None) is None


def test_percentile_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([3, 1, 2], 50) == 2
    assert percentile(list(range(101)), 95) == 95


def test_observe_is_not_held_up_while_a_snapshot_sorts(monkeypatch):
    """A panel tick or a scrape sorts percentiles; the engine thread's observe() must not wait for it."""
    import builtins
    import threading

    import swarm_panel.runtime.serving.metrics as metrics_module

    h = Harness(policy="continuous", num_lanes=2)
    h.add(20, agent="a")
    h.add(20, agent="b")
    h.run()
    agg = MetricsAggregator(window_s=1e9)
    for s in h.steps[:-1]:
        agg.observe(s)
    sorting, release = threading.Event(), threading.Event()

    def slow_sorted(*args, **kwargs):
        sorting.set()
        release.wait(10)
        return builtins.sorted(*args, **kwargs)

    monkeypatch.setattr(metrics_module, "sorted", slow_sorted, raising=False)
    reader = threading.Thread(target=agg.snapshot)
    reader.start()
    try:
        assert sorting.wait(5), "snapshot() sorted nothing"
        writer = threading.Thread(target=agg.observe, args=(h.steps[-1],))
        writer.start()
        writer.join(2.0)
        blocked = writer.is_alive()
    finally:
        release.set()
        reader.join(10)
    writer.join(10)
    assert not blocked, "observe() waited for a snapshot's sorting"
    monkeypatch.undo()
    assert agg.snapshot().total_tokens == 40


def test_listeners_hear_every_observed_step():
    h = Harness(policy="continuous", num_lanes=2)
    h.add(5)
    h.run()
    agg = MetricsAggregator()
    heard = []
    agg.subscribe(heard.append)
    agg.reset()
    for s in h.steps:
        agg.observe(s)
    assert heard == h.steps
