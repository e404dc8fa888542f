"""/metrics' latency histograms hold the engine's own step figures, the ones the panel's percentiles use."""

from __future__ import annotations

import pytest

import swarm_panel.app.endpoint.prom as prom
from swarm_panel.app.endpoint.prom import ServerMetrics
from swarm_panel.runtime.serving.metrics import MetricsAggregator
from tests.helpers import Harness


def _samples(metrics: ServerMetrics) -> dict[str, float]:
    return {s.name: s.value for family in metrics.latency_families({"model_name": "m"}) for s in family.samples
            if s.labels.get("le") in (None, "+Inf") and s.labels["model_name"] == "m"}


def test_histograms_count_exactly_the_samples_the_panel_sees():
    h = Harness(policy="continuous", num_lanes=4)
    for n in (3, 5, 8):
        h.add(n)
    h.run()
    panel = MetricsAggregator(window_s=1e9)
    server = ServerMetrics()
    panel.subscribe(server.observe_step)
    for stats in h.steps:
        panel.observe(stats)
    got = _samples(server)
    ttft = [s for stats in h.steps for _, s in stats.ttft]
    itl = [s for stats in h.steps for _, s in stats.itl]
    e2e = [s for stats in h.steps for _, s in stats.e2e]
    p = prom.PREFIX
    assert got[p + "time_to_first_token_seconds_count"] == len(ttft) == 3
    assert got[p + "time_to_first_token_seconds_sum"] == pytest.approx(sum(ttft))
    assert got[p + "inter_token_latency_seconds_count"] == len(itl) == 3 + 5 + 8 - 3
    assert got[p + "inter_token_latency_seconds_sum"] == pytest.approx(sum(itl))
    assert got[p + "e2e_request_latency_seconds_bucket"] == len(e2e) == 3
    snap = panel.snapshot()
    assert snap.ttft_p50 in ttft and snap.e2e_p95 in e2e


def test_unscraped_steps_are_folded_so_memory_stays_bounded(monkeypatch):
    monkeypatch.setattr(prom, "FOLD_AFTER_STEPS", 4)
    h = Harness(policy="continuous", num_lanes=1)
    h.add(30)
    h.run()
    server = ServerMetrics()
    for stats in h.steps:
        server.observe_step(stats)
    assert len(server._steps) <= 5
    assert _samples(server)[prom.PREFIX + "inter_token_latency_seconds_count"] == 29
