"""The panel's first launch, the engine box's llama settings, the launcher's modes and the agent view."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import httpx
from PySide6 import QtCore

from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.runtime.llama.facts import LlamaFacts
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.ui.panels.engine_panel import EnginePanel, choice_for, engine_changes, writes_real_text
from swarm_panel.ui.shell.app_main import _settings
from swarm_panel.ui.toolkit.settings_store import SettingsStore
from tests.ui.test_ui_common import card, no_user_config, window  # noqa: F401


def test_the_first_launch_serves_the_bundled_real_model(no_user_config, tmp_path):
    settings = _settings(SettingsStore(tmp_path / "fresh.ini"), None, None, None, None)
    assert settings.engine == "llama" and settings.model is None
    assert settings.extra_buffers == "auto" and settings.threads is None


def test_remembered_llama_settings_come_back(no_user_config, tmp_path):
    store = SettingsStore(tmp_path / "panel.ini")
    store.set("engine", "llama")
    store.set("model_path", "demo")
    store.set("threads", 3)
    store.set("extra_buffers", "off")
    store.sync()
    settings = _settings(SettingsStore(tmp_path / "panel.ini"), None, None, None, None)
    assert (str(settings.model), settings.threads, settings.extra_buffers) == ("demo", 3, "off")


def test_engine_choices_map_to_settings_and_back():
    assert engine_changes("bundled", "", threads=2, extra_buffers="off") == {
        "engine": "llama", "model": None, "kv_unified": None, "threads": 2, "extra_buffers": "off"}
    assert engine_changes("demo", "")["model"] == Path("demo")
    assert engine_changes("modeled", "") == {"engine": "modeled"}
    assert [choice_for(*args) for args in (("llama", None), ("llama", "demo"), ("llama", "/m/x.gguf"),
                                            ("modeled", None))] == ["bundled", "demo", "gguf", "modeled"]


def test_the_engine_box_shows_threads_extra_buffers_and_the_model_kind(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_facts({"name": "SmolLM2-135M-Instruct", "n_threads": 1, "memory_kind": "attention",
                      "extra_buffers_reason": "probe crashed with signal 4: off", "chat_template_present": True})
    shown = panel.shown_facts()
    assert shown["threads"] == "1" and shown["memory"] == "attention"
    assert shown["extra buffers"] == "probe crashed with signal 4: off"
    panel.select("llama", None, threads=2, extra_buffers="off")
    assert panel.choice.currentData() == "bundled" and panel.threads.value() == 2
    assert panel.extra_buffers.currentData() == "off"
    with qtbot.waitSignal(panel.load_requested) as loaded:
        panel.load.click()
    assert loaded.args[0]["threads"] == 2 and loaded.args[0]["extra_buffers"] == "off"


def test_real_text_is_told_apart_from_the_cost_model_and_the_demo():
    def llama(**given) -> LlamaFacts:
        return LlamaFacts(**{f.name: None for f in fields(LlamaFacts)} | given)

    assert writes_real_text(llama(name="SmolLM2-135M-Instruct", chat_template_present=True))
    assert not writes_real_text(llama(name="swarm-panel demo (random weights)", chat_template_present=True))
    assert not writes_real_text(ModeledEngine().facts)
    assert not writes_real_text(None)


def test_the_launcher_runs_fixed_lengths_on_the_cost_model_and_real_agents_need_the_endpoint(window):
    launcher = window.launcher
    assert launcher.mode.currentData() == "fixed"  # the modeled card writes no text
    launcher.suit_engine(True)
    assert launcher.real_agents and not launcher.lengths.isEnabled()
    launcher.url = None
    assert launcher.start() is None
    assert "endpoint" in launcher.status.text()


def test_the_agent_view_follows_an_agent_picked_in_the_table(window, qtbot):
    with ThreadedHttpServer(window.service, port=0) as server:
        reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=30, json={
            "model": "m", "user": "agent-zed", "max_tokens": 12, "ignore_eos": True,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix the bug"}]})
        assert reply.status_code == 200, reply.text
    qtbot.waitUntil(lambda: any(r.agent == "agent-zed" for r in window.agents.table.agents.rows), timeout=5000)
    row = [r.agent for r in window.agents.table.agents.rows].index("agent-zed")
    window.agents.table.clicked.emit(window.agents.table.agents.index(row, 0))
    view = window.agent_view
    assert view.agent == "agent-zed"
    window.refresh()
    assert view.asked.text() == "asked: fix the bug"
    assert view.answer.toPlainText() == reply.json()["choices"][0]["message"]["content"]
    assert "finish_reason: length" in view.status.text() and "12 tokens" in view.status.text()


def test_a_click_on_a_lane_opens_the_agent_in_it(window, qtbot):
    from swarm_panel.runtime.core.request import Request, SamplingParams

    request = Request([5] * 8, SamplingParams(max_tokens=20_000, ignore_eos=True), agent="lane-agent")
    window.service.engine_thread.submit(request)
    window.service.activity.began("lane-agent", request, "hello")
    qtbot.waitUntil(lambda: any(lane.agent == "lane-agent" for lane in window.service.engine_thread.lanes()),
                    timeout=5000)
    lane = next(lane.index for lane in window.service.engine_thread.lanes() if lane.agent == "lane-agent")
    window.refresh()
    timeline = window.timeline
    x_range, _ = timeline.plot.vb.viewRange()
    where = timeline.plot.vb.mapViewToScene(QtCore.QPointF(sum(x_range) / 2, lane + 0.5))
    assert timeline.lane_at(where) == lane
    with qtbot.waitSignal(timeline.lane_clicked) as clicked:
        timeline.lane_clicked.emit(timeline.lane_at(where))
    assert clicked.args == [lane]
    assert window.agent_view.agent == "lane-agent"
    window.service.engine_thread.abort(request.request_id)
