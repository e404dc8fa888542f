"""A marker set after the last tick stays inside the plots' time axis."""

from __future__ import annotations

from swarm_panel.app.service.step_feed import StepFeed
from swarm_panel.ui.plots.live_plots import PlotsPanel


def test_a_marker_newer_than_the_last_tick_widens_the_axis_to_it(qtbot):
    feed = StepFeed()
    for second in range(1, 11):
        feed.tick(now=feed.t0 + second)
    feed.mark("a layout change", now=feed.t0 + 10.5)
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.refresh(feed)
    marker = feed.markers[-1]
    for plot in panel.plots.values():
        (_, right), _ = plot.viewRange()
        assert right >= marker.time
