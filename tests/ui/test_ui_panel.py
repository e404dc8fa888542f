"""The real widgets against a SwarmService on the modeled engine: switch, sync, plots, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import fields

import httpx
import numpy as np
import pytest

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.runtime.llama.facts import LlamaFigures
from tests.app.server.test_server_common import panel
from tests.ui.test_ui_common import SHORT_LENGTHS, STEADY_CARD, card, no_user_config, window  # noqa: F401

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def start_load(win, agents: int = 8) -> LocalSwarm:
    swarm = LocalSwarm(win.service.engine_thread, agents=agents, lengths=SHORT_LENGTHS, prompt_tokens=8)
    swarm.start()
    return swarm


def test_policy_switch_changes_the_scheduler_and_the_http_view(window, qtbot):
    window.controls.buttons["continuous"].click()
    thread = window.service.engine_thread
    assert thread.config.policy == "continuous"
    qtbot.waitUntil(lambda: thread.scheduler.config.policy == "continuous", timeout=3000)
    with ThreadedHttpServer(window.service, port=0) as server:
        state = httpx.get(f"{server.url}/v1/scheduler").json()
    assert state["policy"] == "continuous"

    window.controls.num_lanes.setValue(12)
    assert thread.config.num_lanes == 12


def test_a_change_over_http_moves_the_switch_and_the_knobs(window, qtbot):
    assert window.controls.buttons["naive"].isChecked()
    with ThreadedHttpServer(window.service, port=0) as server:
        response = httpx.put(f"{server.url}/v1/scheduler", json={"policy": "shrinking", "num_lanes": 4,
                                                                  "prefill_chunk": 128}, headers=panel(server))
        assert response.status_code == 200, response.text
    qtbot.waitUntil(lambda: window.controls.buttons["shrinking"].isChecked(), timeout=2000)
    assert window.controls.num_lanes.value() == 4
    assert window.controls.prefill_chunk.value() == 128
    assert not window.controls.buttons["naive"].isChecked()
    # The chunk change is marked on every plot although no step records it.
    qtbot.waitUntil(lambda: any("chunk 128" in label for label in window.plots.marker_labels()), timeout=2000)


def test_an_invalid_knob_is_a_message_not_a_crash(window):
    window.controls.num_lanes.setMaximum(1000)
    window.controls.num_lanes.setValue(999)
    assert "Not applied" in window.controls.message.text()
    assert window.service.engine_thread.config.num_lanes == 8
    assert window.controls.num_lanes.value() == 8


def test_plots_and_lane_timeline_receive_data(window, qtbot):
    swarm = start_load(window)
    try:
        qtbot.waitUntil(lambda: len(window.plots.series("tok_s")) > 10 and window.plots.series("tok_s").max() > 0,
                        timeout=5000)
        qtbot.waitUntil(lambda: window.timeline.last_image is not None, timeout=2000)
    finally:
        swarm.stop()
    assert np.nanmax(window.plots.series("live")) >= 1
    assert np.nanmax(window.plots.series("held")) <= 8
    assert np.nanmax(window.plots.series("kv_pct")) > 0
    image = window.timeline.last_image
    assert image.shape[0] == 8 * 6 and image.shape[2] == 4  # eight lanes, RGBA
    from swarm_panel.app.service.step_feed import CODE_DECODE
    from swarm_panel.ui.plots.lane_timeline import LUT

    assert (image[..., :3].reshape(-1, 3) == LUT[CODE_DECODE]).all(axis=1).any()


def test_naive_to_continuous_with_load_running_raises_plotted_utilization(window, qtbot):
    swarm = start_load(window)
    try:
        qtbot.wait(2500)
        window.controls.buttons["continuous"].click()
        qtbot.waitUntil(lambda: "→ continuous" in window.plots.marker_labels(), timeout=3000)
        qtbot.wait(2500)
    finally:
        swarm.stop()
    t = window.plots.curves["utilization"].getData()[0]
    utilization = window.plots.series("utilization")
    switched = next(m.time for m in window.feed.markers if m.label == "→ continuous")
    before = utilization[(t > switched - 1.5) & (t < switched)]
    after = utilization[t > switched + 1.2]
    before, after = before[np.isfinite(before)], after[np.isfinite(after)]
    assert len(before) > 5 and len(after) > 5
    assert np.mean(before) < 75, np.mean(before)  # padding rides along under naive static
    assert np.mean(after) > 95, np.mean(after)  # continuous keeps every held lane useful
    assert np.mean(after) - np.mean(before) > 25
    # The lane timeline's newest columns hold no padding; the columns before the switch do.
    from swarm_panel.app.service.step_feed import CODE_PADDING

    marker = next(m for m in window.feed.markers if m.label == "→ continuous")
    codes = window.feed.lanes.rows()
    first = window.feed.lanes.count - len(codes)
    assert not (codes[-100:] == CODE_PADDING).any()
    assert (codes[: max(marker.column - first, 0)] == CODE_PADDING).any()


def test_the_swarm_launcher_drives_the_endpoint_over_http(window, qtbot):
    from swarm_panel.app.loadgen.swarm import SwarmConfig, run_swarm

    with ThreadedHttpServer(window.service, port=0) as server:
        report = {}

        def drive() -> None:
            config = SwarmConfig(url=server.url, agents=4, seconds=3.0, lengths=SHORT_LENGTHS)
            report["result"] = asyncio.run(run_swarm(config))

        driver = threading.Thread(target=drive)
        driver.start()
        qtbot.waitUntil(lambda: "agents connected" in window.agents.connected.text()
                        and not window.agents.connected.text().startswith("0 "), timeout=5000)
        driver.join(10)
    assert report["result"].requests > 0
    from swarm_panel.ui.panels.agents_table import HEADERS

    agents = window.agents.table.agents
    qtbot.waitUntil(lambda: len(agents.rows) == 4, timeout=2000)
    assert {row.agent for row in agents.rows} == {f"agent-0{i}" for i in range(1, 5)}
    # Each agent's row counts the requests it was served over HTTP and their tokens, and the table shows them.
    qtbot.waitUntil(lambda: all(row.figures.requests > 0 and row.figures.tokens > 0 for row in agents.rows),
                    timeout=2000)
    requests, tokens = HEADERS.index("req"), HEADERS.index("tokens")
    for i, row in enumerate(agents.rows):
        assert agents.data(agents.index(i, 0)) == row.agent
        assert agents.data(agents.index(i, requests)) == str(row.figures.requests)
        assert agents.data(agents.index(i, tokens)) == f"{row.figures.tokens:,}"


@pytest.mark.parametrize("card", [STEADY_CARD])
def test_ab_run_draws_a_bar_per_policy(window, qtbot):
    window.launcher.lengths.setText(", ".join(map(str, SHORT_LENGTHS)))
    window.launcher.preset.setCurrentText("custom")
    window.launcher.lengths.setText(", ".join(map(str, SHORT_LENGTHS)))
    with qtbot.waitSignal(window.ab.finished, timeout=25000) as blocker:
        assert window.ab.start(seconds=2.5)
    results = {r["policy"]: r for r in blocker.args[0]}
    assert set(results) == {"naive", "shrinking", "continuous"}
    assert results["continuous"]["tok_s"] > results["naive"]["tok_s"]
    assert results["continuous"]["utilization"] > results["naive"]["utilization"]
    assert len(window.ab.chart.results) == 3
    assert window.service.engine_thread.config.policy == "naive"  # restored
    assert not window.launcher.running


def test_closing_the_window_stops_the_swarm_and_the_engine(window, qtbot):
    thread = window.service.engine_thread
    window.launcher.preset.setCurrentText("custom")
    window.launcher.lengths.setText(", ".join(map(str, SHORT_LENGTHS)))
    assert window.launcher.start() == "local"
    qtbot.wait(300)
    window.close()
    assert not window.service.loaded
    assert not thread.alive
    assert not window.launcher.running
    assert not window.timer.isActive()
    assert not [t for t in threading.enumerate() if t.name == "swarm-engine" and t.is_alive()]


def test_load_errors_are_messages_and_the_panel_recovers(qtbot, no_user_config, tmp_path):
    from swarm_panel.app.service.engine_service import SwarmService
    from swarm_panel.app.settings.schema import Settings
    from swarm_panel.ui.shell.main_window import MainWindow

    service = SwarmService(Settings(engine="modeled", port=0))
    service.start()
    win = MainWindow(service)
    qtbot.addWidget(win)
    try:
        corrupt = tmp_path / "corrupt.gguf"
        corrupt.write_bytes(b"GGUF" + b"\x00garbage" * 64)
        for path in (tmp_path / "missing.gguf", corrupt):
            with qtbot.waitSignal(win.engine_loaded, timeout=20000) as blocker:
                win.load_engine({"engine": "llama", "model": path})
            assert blocker.args[0]  # an error message, not an exception
            assert "Could not load" in win.engine_panel.status.text()
            assert str(path.name) in win.engine_panel.status.text() or "load" in win.engine_panel.status.text()
            win.refresh()  # polling with no engine loaded is fine
        with qtbot.waitSignal(win.engine_loaded, timeout=20000) as blocker:
            win.load_engine({"engine": "modeled"})
        assert blocker.args[0] is None
        assert service.loaded
        assert "Qwen3.5-9B" in win.engine_panel.toolTip()
    finally:
        win.close()
        service.stop()


@pytest.mark.parametrize("suffix", [".json", ".csv", ".png"])
def test_export_figures_and_plots(window, qtbot, tmp_path, suffix):
    swarm = start_load(window)
    qtbot.wait(600)
    swarm.stop()
    path = tmp_path / f"out{suffix}"
    if suffix == ".png":
        window.export_plots(str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        window.export_figures(str(path))
        text = path.read_text()
        if suffix == ".json":
            import json

            data = json.loads(text)
            assert data["scheduler"]["policy"] == "naive"
            assert data["figures"]["total_tokens"] > 0
            assert len(data["series"]) > 3
        else:
            assert "tok_s,padding_tok_s" in text and "# total_tokens," in text


def test_settings_persist_between_runs(window, tmp_path):
    from swarm_panel.ui.shell.app_main import _settings
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    window.controls.buttons["continuous"].click()
    window.controls.num_lanes.setValue(16)
    window.launcher.agents.setValue(12)
    window.launcher.spread.setValue(15)
    window.ab.seconds.setValue(45)
    window.apply_scheduler(prefix_cache=False)
    window.close()
    store = SettingsStore(tmp_path / "panel.ini")
    assert store.get("scheduler")["policy"] == "continuous"
    assert store.get("swarm")["agents"] == 12
    assert store.get("swarm")["spread"] == 1.5
    assert store.get("ab_seconds") == 45
    settings = _settings(store, None, None, 0, None)
    assert (settings.policy, settings.num_lanes, settings.engine) == ("continuous", 16, "modeled")
    # Every scheduler knob is remembered, the prefix-cache switch included.
    assert store.get("scheduler")["prefix_cache"] is False and settings.prefix_cache is False
    assert _settings(store, None, None, 0, "naive").policy == "naive"  # a flag wins


def test_cache_panel_shows_reuse_and_its_switch_follows_the_scheduler(window, qtbot):
    from swarm_panel.runtime.core.request import Request, SamplingParams

    thread = window.service.engine_thread
    for _ in range(2):
        done = []
        request = Request(list(range(10, 110)), SamplingParams(max_tokens=4), agent="agent-x")
        request.listener = lambda out, done=done: out.finished and done.append(out)
        thread.submit(request)
        qtbot.waitUntil(lambda done=done: bool(done), timeout=3000)
    # The second prompt reuses all but its last token (which must be computed to sample from).
    qtbot.waitUntil(lambda: "99 reused" in window.cache_panel.figures.text(), timeout=3000)
    qtbot.waitUntil(lambda: np.nanmax(window.plots.series("kv_cached_pct")) > 0, timeout=3000)
    window.cache_panel.enabled.setChecked(False)
    assert thread.config.prefix_cache is False
    thread.reconfigure(prefix_cache=True)
    qtbot.waitUntil(window.cache_panel.enabled.isChecked, timeout=2000)


def test_the_engine_panel_loads_a_gguf_with_split_kv_and_shows_it(qtbot, no_user_config, tiny_model_path):
    from swarm_panel.app.service.engine_service import SwarmService
    from swarm_panel.app.settings.schema import Settings
    from swarm_panel.ui.shell.main_window import MainWindow

    service = SwarmService(Settings(engine="modeled", port=0))
    service.start()
    win = MainWindow(service)
    qtbot.addWidget(win)
    panel = win.engine_panel
    try:
        assert not panel.layout_choice.isVisibleTo(panel)  # the modeled card has no KV layout
        panel.choice.setCurrentIndex(panel.choice.findData("gguf"))
        panel.path.setText(str(tiny_model_path))
        panel.layout_choice.setCurrentIndex(panel.layout_choice.findData(False))
        assert panel.layout_choice.isVisibleTo(panel)
        with qtbot.waitSignal(win.engine_loaded, timeout=30000) as blocker:
            panel.load.click()
        assert blocker.args[0] is None
        assert service.engine.kv_unified is False and service.settings.kv_unified is False
        shown = panel.shown_facts()
        assert shown.get("KV layout", "").startswith("split KV")
        win.save_settings()
        assert win.store is None or win.store.get("kv_unified") is False
    finally:
        win.close()
        service.stop()


def test_the_ceiling_is_measured_at_the_running_width_else_the_last_fit(window, qtbot, monkeypatch):
    from swarm_panel.runtime.core.fit import StepLine

    swarm = start_load(window)
    try:
        qtbot.waitUntil(lambda: len(window.feed.steps.column("time")) > 0, timeout=5000)  # the panel has steps
    finally:
        swarm.stop()

    def ceiling_with(**figures) -> float:
        snapshot = dataclasses.replace(window.service.metrics.snapshot(), **figures)
        monkeypatch.setattr(window.service.metrics, "snapshot", lambda: snapshot)
        window._refresh_slow(window.service.engine_thread)
        window.feed.tick()
        return window.feed.latest("ceiling")

    line = StepLine(floor_ms=10.0, per_row_ms=1.0, points=40)
    # A swarm holds its full width: the steps measured there, not a line fitted through other widths.
    assert ceiling_with(step_line=line, step_ms_by_width={7: 16.0, 8: 20.0}) == pytest.approx(400.0)
    assert "(t(8) = 20.0 ms measured)" in window.status.ceiling.text()
    assert ceiling_with(step_line=line, step_ms_by_width={4: 14.0}) == pytest.approx(8 / 18.0 * 1e3)
    # Where t(B) is flat, noise can tip the fit over to falling (no fit): the last one stays.
    assert ceiling_with(step_line=None, step_ms_by_width={}) == pytest.approx(8 / 18.0 * 1e3)
    assert "ceiling at B=8: 444 tok/s" in window.status.ceiling.text()


def test_the_status_bar_says_when_a_neighbour_took_llama_cpp_threads(window, monkeypatch):
    engine = window.service.engine
    window._refresh_slow(window.service.engine_thread)
    assert "threads" not in window.status.rate.text()
    # The window runs the modeled card; the llama engine's figures are what name its threads.
    counts = dict.fromkeys((f.name for f in fields(LlamaFigures)), 0)
    llama = LlamaFigures(**(counts | {"threads_follow_contention": True, "n_threads": 1, "threads_most": 2,
                                      "other_processes_cpu_cores": 1.0, "decode_call_fit": None}))
    monkeypatch.setattr(engine, "figures", lambda: llama)
    window._refresh_slow(window.service.engine_thread)
    assert window.status.rate.text().endswith("; llama.cpp on 1 of 2 threads: other processes use 1.0 cores")


def test_a_marker_at_the_newest_step_keeps_its_label_inside_the_plot(window, qtbot):
    import pyqtgraph as pg

    swarm = start_load(window)
    try:
        qtbot.waitUntil(lambda: len(window.plots.series("tok_s")) > 10, timeout=5000)
        window.feed.mark("→ a label as long as a kernel switch's")
        qtbot.waitUntil(lambda: "→ a label as long as a kernel switch's" in window.plots.marker_labels(), timeout=3000)
    finally:
        swarm.stop()
    labelled = 0
    for plot in window.plots.plots.values():
        view = plot.getViewBox().sceneBoundingRect()
        lines = [item for item in plot.items if isinstance(item, pg.InfiniteLine)]
        assert lines
        for line in (line for line in lines if line.label.isVisible()):  # labelled on the highest plot only
            labelled += 1
            label = line.label.sceneBoundingRect()
            # At the right edge the text sits left of its line rather than running off the plot.
            assert view.left() <= label.left() and label.right() <= view.right() + 1, (label, view)
    assert labelled >= 1
