"""A hybrid model's checkpoint memory reaches the KV plot, beside the KV curves."""

from __future__ import annotations

from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import VirtualClock
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.serving.metrics import MetricsAggregator
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import SwarmWorkload
from swarm_panel.ui.plots.live_plots import PlotsPanel


def test_the_kv_plot_shows_checkpoint_memory_of_the_modeled_hybrid(qtbot):
    metrics = MetricsAggregator()
    engine = ModeledEngine()
    workload = SwarmWorkload(agents=4, lengths=(5, 9), requests_per_agent=3, system_tokens=200, conversation=True)
    run_closed_loop(engine, SchedulerConfig(num_lanes=4), workload, VirtualClock(), on_stats=metrics.observe)
    snap = metrics.snapshot()
    assert snap.checkpoints > 0 and snap.checkpoint_bytes == snap.checkpoints * engine.profile.recurrent_state_bytes
    feed = StepFeed()
    feed.pull(metrics)
    feed.tick()
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.refresh(feed)
    budget = engine.checkpoints.budget_bytes
    assert feed.latest("checkpoint_pct") == 100.0 * snap.checkpoint_bytes / budget
    _, y = panel.curves["checkpoint_pct"].getData()
    assert y[-1] == feed.latest("checkpoint_pct")
    assert f"checkpoints {snap.checkpoint_bytes / 1e6:,.1f} MB" in panel.kv_summary
