"""The modeled card's ceiling-against-context plot: three KV curves, the swarm's marker, the KV switch."""

from __future__ import annotations

import pytest

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.runtime.modeled.ceiling import ceiling
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.planning.memory_plan import KV_TYPES
from swarm_panel.runtime.serving.metrics import MetricsSnapshot
from swarm_panel.ui.plots.ceiling_plot import CeilingPlot
from tests.ui.test_ui_common import SHORT_LENGTHS, card, no_user_config, window  # noqa: F401


def test_the_plot_draws_a_ceiling_curve_per_kv_type_and_highlights_the_loaded_one(qtbot):
    plot = CeilingPlot(CARD)
    qtbot.addWidget(plot)
    assert plot.curve_names() == list(KV_TYPES)
    assert plot.highlighted == "f16"
    widths = {kv: plot.curves[kv].opts["pen"].widthF() for kv in KV_TYPES}
    assert widths["f16"] > widths["q8_0"] == widths["q4_0"]
    # The curves are the ceiling table's: at 16k q4_0 stays well above f16.
    for kv in KV_TYPES:
        assert plot.ceiling_at(kv, 16384) == pytest.approx(ceiling(CARD.with_kv_type(kv), 16384).tok_s)
    assert plot.ceiling_at("q4_0", 16384) > plot.ceiling_at("q8_0", 16384) > plot.ceiling_at("f16", 16384)
    legend = [label.text for _, label in plot.legend.items]
    assert legend[0].startswith("f16") and "loaded" in legend[0] and len(legend) == 3
    plot.set_profile(CARD.with_kv_type("q4_0"))
    assert plot.highlighted == "q4_0"
    assert plot.curves["q4_0"].opts["pen"].widthF() > plot.curves["f16"].opts["pen"].widthF()
    plot.set_lanes(8)
    assert plot.lanes_curve.isVisible() and "8 lanes" in plot.legend.items[-1][1].text


def test_the_marker_moves_to_the_swarm_each_snapshot_places_it(qtbot):
    plot = CeilingPlot(CARD)
    qtbot.addWidget(plot)
    assert plot.marker_position() is None
    state = CARD.state_tokens_per_sequence
    # 8 sequences of 1,000 tokens each, their recurrent states charged in the KV used.
    plot.show_swarm(MetricsSnapshot(tok_s=290.0, width_held=8, kv_used=8 * (1000 + state)), state)
    context, tok_s = plot.marker_position()
    assert context == pytest.approx(1000) and tok_s == pytest.approx(290.0)
    plot.show_swarm(MetricsSnapshot(tok_s=180.0, width_held=4, kv_used=4 * (8000 + state)), state)
    context, tok_s = plot.marker_position()
    assert context == pytest.approx(8000) and tok_s == pytest.approx(180.0)
    assert "180 tok/s" in plot.header.text() and "4 lanes" in plot.header.text()
    plot.show_swarm(MetricsSnapshot(), state)  # idle: no swarm to place
    assert plot.marker_position() is None


def test_the_kv_switch_reloads_the_modeled_card_and_moves_the_highlight(window, qtbot):
    panel, tabs = window.engine_panel, window.plot_tabs
    assert panel.kv_type.isVisibleTo(panel)
    assert tabs.isTabVisible(tabs.indexOf(window.ceiling_plot))
    assert window.ceiling_plot.highlighted == window.service.engine.kv_type == "f16"
    f16_capacity = window.service.engine.kv_capacity
    with qtbot.waitSignal(window.engine_loaded, timeout=10000) as loaded:
        panel.kv_type.setCurrentIndex(panel.kv_type.findData("q4_0"))
    assert loaded.args[0] is None
    engine = window.service.engine
    assert engine.kv_type == "q4_0" and window.service.settings.kv_type == "q4_0"
    assert engine.kv_capacity / f16_capacity == pytest.approx(64 / 18, abs=1e-3)
    assert window.ceiling_plot.highlighted == "q4_0"
    assert panel.shown_facts()["KV type"] == "q4_0"
    # A live swarm's steps place the marker at the next slow refresh.
    swarm = LocalSwarm(window.service.engine_thread, agents=8, lengths=SHORT_LENGTHS, prompt_tokens=64)
    swarm.start()
    try:
        def placed() -> bool:
            window._refresh_slow(window.service.engine_thread)
            return window.ceiling_plot.marker_position() is not None

        qtbot.waitUntil(placed, timeout=8000)
    finally:
        swarm.stop()
    context, tok_s = window.ceiling_plot.marker_position()
    assert 64 <= context <= 64 + max(SHORT_LENGTHS) + 2 and tok_s > 0
    window.save_settings()
    assert window.store.get("kv_type") == "q4_0"
