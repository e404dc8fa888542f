"""Qt-free pieces of the panel: ring buffers, the step feed, the timeline image, the CLI wiring."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from swarm_panel.app.service.ring import Ring
from swarm_panel.app.service.step_feed import CODE_DECODE, CODE_PADDING, StepFeed
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.serving.metrics import MetricsAggregator


def step(i: int, t: float, policy: str = "naive", num_lanes: int = 8, lanes: str = "DDDDxxxx") -> StepStats:
    decode = lanes.count("D")
    padding = lanes.count("x")
    return StepStats(index=i, time=t, duration=0.02, policy=policy, num_lanes=num_lanes, width_held=decode + padding,
                     live_lanes=decode, padding_lanes=padding, decode_rows=decode, prefill_rows=0, prefill_tokens=0,
                     useful_tokens=decode, queue_depth=2, kv_used=100 + i, kv_capacity=1000, finished=0, lanes=lanes)


def test_ring_views_are_the_newest_values_in_order():
    ring = Ring(5, ("a",))
    for i in range(13):
        ring.append((i,))
        assert list(ring.column("a")) == list(range(max(0, i - 4), i + 1))
    ring.extend(np.array([[100.0], [101.0], [102.0]]))
    assert list(ring.column("a")) == [11, 12, 100, 101, 102]
    assert list(ring.column("a", 2)) == [101, 102]
    wide = Ring(4, (), width=3, dtype=np.uint8)
    wide.extend(np.arange(30, dtype=np.uint8).reshape(10, 3))
    assert wide.rows()[0].tolist() == [18, 19, 20] and wide.rows(1)[0].tolist() == [27, 28, 29]


def test_feed_takes_only_new_steps_and_marks_policy_and_width_changes():
    metrics = MetricsAggregator()
    feed = StepFeed()
    t = feed.t0
    for i in range(10):
        metrics.observe(step(i, t + 0.02 * (i + 1)))
    assert len(feed.pull(metrics)) == 10
    assert feed.pull(metrics) == []
    metrics.observe(step(10, t + 0.3, policy="continuous", lanes="DDDDDDDD"))
    metrics.observe(step(11, t + 0.32, policy="continuous", num_lanes=16, lanes="DDDDDDDD"))
    assert len(feed.pull(metrics)) == 2
    assert [m.label for m in feed.markers] == ["→ continuous", "B=16"]
    assert feed.markers[0].column == 10
    codes = feed.lanes.rows()
    assert codes.shape[0] == 12 and (codes[0, 4:8] == CODE_PADDING).all() and (codes[-1, :8] == CODE_DECODE).all()
    figures = feed.window(0.0, 0.25)
    assert figures["steps"] == 10 and abs(figures["utilization"] - 0.5) < 1e-9


def test_feed_marks_chunk_and_kv_budget_changes_from_the_polled_config():
    from swarm_panel.runtime.core.config import SchedulerConfig

    feed = StepFeed()
    feed.note_config(SchedulerConfig())
    feed.note_config(SchedulerConfig(prefill_chunk=64, kv_budget=4096))
    assert [m.label for m in feed.markers] == ["chunk 64, KV 4096"]


def test_feed_shows_the_device_busy_share_of_its_last_window():
    from swarm_panel.runtime.serving.metrics import StepTotals

    feed = StepFeed(window_s=1.0)
    t0 = feed.t0
    feed.tick(now=t0 + 0.1)
    assert np.isnan(feed.latest("device_busy"))
    feed.note_step_times(StepTotals(device=10.0, host=5.0, idle=5.0), now=t0 + 0.2)
    feed.note_step_times(StepTotals(device=10.5, host=5.25, idle=5.25), now=t0 + 1.0)
    feed.tick(now=t0 + 1.0)
    assert feed.latest("device_busy") == 50.0
    # Older reads leave the window: the share is of the last second only.
    feed.note_step_times(StepTotals(device=10.5, host=6.25, idle=5.25), now=t0 + 2.1)
    feed.tick(now=t0 + 2.1)
    assert feed.latest("device_busy") == 0.0


def test_timeline_image_hatches_padding_and_separates_lanes():
    from swarm_panel.ui.plots.lane_timeline import GAP, LUT, SUBROWS, render

    codes = np.array([[CODE_DECODE, CODE_PADDING]] * 16, dtype=np.uint8)  # 16 steps, 2 lanes
    image = render(codes, 0)[..., :3]
    assert image.shape == (2 * SUBROWS, 16, 3)
    lane1 = image[SUBROWS + 1 :].reshape(-1, 3)
    colours = {tuple(c) for c in lane1}
    assert colours == {tuple(LUT[CODE_PADDING]), tuple(LUT[5])}  # two greys: the hatch
    assert (image[0] == LUT[GAP]).all()
    assert {tuple(c) for c in image[1:SUBROWS].reshape(-1, 3)} == {tuple(LUT[CODE_DECODE])}


def test_cli_registers_gui_without_importing_qt():
    code = ("import sys, swarm_panel.ui.shell.cli; p = swarm_panel.ui.shell.cli.build_parser(); a = p.parse_args(['gui', '--engine', 'modeled', "
            "'--swarm', '8', '--quit-after', '2']); assert a.swarm == 8 and a.quit_after == 2.0; "
            "assert not [m for m in sys.modules if m.startswith('PySide6') or m.startswith('pyqtgraph')], 'Qt'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_runtime_and_app_never_import_qt():
    code = ("import sys, pkgutil, importlib, swarm_panel.runtime as runtime, swarm_panel.app as app\n"
            "for pkg in (runtime, app):\n"
            "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
            "        importlib.import_module(m.name)\n"
            "bad = [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'qasync', 'swarm_panel.ui'))]\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

