"""The main panel on a fleet: the engine box's fleet choice serves the panel's own endpoint through the
gateway in front of two real `swarm-panel serve` backends, the fleet plots replace the engine's, and
the modeled engine comes back on the same endpoint. Plus the backend list's parsing and settings."""

from __future__ import annotations

import asyncio
import math
import re
import time
from contextlib import ExitStack

import httpx
import openai
import pytest

from swarm_panel.app.settings.backends import parse_backend_lines
from tests.gateway_fleet import backend
from tests.ui.test_ui_common import fast_service, no_user_config  # noqa: F401 - a fixture

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow

SCENARIO_TIMEOUT_S = 150.0


def label(url: str) -> str:
    return url.split("//", 1)[1]


def choose(panel, key: str) -> None:
    from swarm_panel.ui.panels.engine_panel import CHOICES

    panel.choice.setCurrentIndex([k for k, _ in CHOICES].index(key))


async def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def load(window, click) -> str | None:
    """Clicks and waits for the window's engine_loaded(error)."""
    done = asyncio.get_running_loop().create_future()

    def finished(error):
        if not done.done():
            done.set_result(error)

    window.engine_loaded.connect(finished)
    try:
        click()
        return await asyncio.wait_for(done, 60)
    finally:
        window.engine_loaded.disconnect(finished)


async def ask(client: openai.AsyncOpenAI, agent: str):
    return await client.chat.completions.with_raw_response.create(
        model="m", max_tokens=4, user=agent, extra_body={"ignore_eos": True},
        messages=[{"role": "system", "content": f"You are agent {agent}. " * 12}, {"role": "user", "content": "hi"}])


async def scenario(qtbot, tmp_path, backends) -> None:
    from swarm_panel.app.server.http_server import HttpServer
    from swarm_panel.ui.fleet.fleet_mode import EMBEDDED_ONLY_TIP, NOT_MEASURED_TIP
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    theme.configure_pyqtgraph()
    service = fast_service()
    service.start()
    store = SettingsStore(tmp_path / "panel.ini")
    window = MainWindow(service, store)
    qtbot.addWidget(window)
    window.show()
    http = HttpServer(service, port=0)
    await http.start()
    window.set_endpoint(http.url)
    window.attach_endpoint(http)
    panel = window.engine_panel
    urls = [u for u, _ in backends]
    try:
        async with openai.AsyncOpenAI(base_url=f"{http.url}/v1", api_key="x", max_retries=0) as client:
            raw = await ask(client, "before")
            assert "x-swarm-backend" not in raw.headers  # the embedded engine answers

            choose(panel, "fleet")
            assert panel.backends.isVisible() and not panel.layout_choice.isVisible()
            panel.backends.setPlainText("http://127.0.0.1:1\nnot-a-url")
            panel.load.click()
            assert "line 2" in panel.status.text() and "not an http(s) URL" in panel.status.text()
            assert service.loaded  # a bad list changes nothing

            panel.backends.setPlainText("\n".join(f"swarm-panel={u}" for u in urls))
            assert await load(window, panel.load.click) is None
            assert not service.loaded
            fleet_panel = window.fleet.panel
            assert window.centre.currentWidget() is fleet_panel
            assert "Serving through the gateway" in panel.status.text()

            seen = set()
            for i in range(4):
                raw = await ask(client, f"agent-{i}")
                assert raw.parse().usage.completion_tokens == 4
                seen.add(raw.headers["x-swarm-backend"])
            assert seen == {label(u) for u in urls}

            # One line per backend plus the total, drawn from what the poller saw after the panel opened.
            await until(lambda: all(sum(p.t >= fleet_panel.t0 for p in b.history) >= 2
                                    for b in window.fleet.gateway.backends), 20, "two polls of each backend")
            fleet_panel.refresh()
            for name in [label(u) for u in urls] + ["fleet"]:
                occupancy = fleet_panel.series("occupancy", name)
                assert len(occupancy) and not math.isnan(occupancy[-1]), name

            # The engine's own controls say why they are off; the KPIs show what the fleet has.
            switch = window.controls.switch
            assert not switch.buttons["naive"].isEnabled()
            assert switch.buttons["naive"].toolTip() == EMBEDDED_ONLY_TIP
            async with httpx.AsyncClient() as plain:  # on the loop: the gateway answers on this very loop
                answer = await plain.put(f"{http.url}/v1/scheduler", json={"policy": "fewest-in-flight"},
                                         headers={"Authorization": f"Bearer {window.service.agent_keys.panel_key}"})
            assert answer.json()["policy"] == "fewest-in-flight"
            window._ticks = 0
            window.refresh()
            assert "fewest requests in flight" in window.policy_caption.text()
            assert window.kpis.labels["occupancy"].text().endswith("%")
            assert window.kpis.labels["utilization"].text() == "–"
            assert window.kpis.labels["utilization"].toolTip() == NOT_MEASURED_TIP
            assert {f"agent-{i}" for i in range(4)} <= {row.agent for row in window.agents.table.agents.rows}
            assert window.statusBar().currentMessage().startswith("fleet: 2 of 2 backends up")

            window.save_settings()
            assert store.get("fleet") is True
            assert parse_backend_lines("\n".join(store.get("backends"))) == [b.config for b in
                                                                            window.fleet.gateway.backends]

            # A backend that goes down is shown as such; the other keeps answering.
            backends[1][1].kill()
            await until(lambda: window.fleet.gateway.backends[1].up is False, 10, "the backend marked down")
            fleet_panel.refresh()
            assert f"{label(urls[1])}</b></span> swarm-panel: <span style='color:#ff8a80'>down" in \
                fleet_panel.status.text()
            for i in range(2):
                raw = await ask(client, f"late-{i}")
                assert raw.headers["x-swarm-backend"] == label(urls[0])

            choose(panel, "modeled")
            assert await load(window, panel.load.click) is None
            assert service.loaded and not window.fleet.active
            assert window.centre.currentIndex() == 0 and window.centre.count() == 1
            assert switch.buttons["naive"].isEnabled() and switch.buttons["naive"].toolTip() != EMBEDDED_ONLY_TIP
            assert window.policy_caption.text() == "batching policy"
            raw = await ask(client, "after")
            assert "x-swarm-backend" not in raw.headers and raw.parse().usage.completion_tokens == 4
            async with httpx.AsyncClient() as plain:
                assert (await plain.get(f"{http.url}/v1/scheduler")).json()["policy"] == "naive"
    finally:
        window.close()
        await window.fleet.close()
        await http.stop()
        service.stop()


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 120)
def test_the_panel_serves_a_fleet_from_its_engine_box_and_switches_back(qtbot, qapp, no_user_config, tmp_path,
                                                                        tiny_model_path):
    import qasync

    with ExitStack() as stack:
        backends = [stack.enter_context(backend(tiny_model_path, tmp_path, f"backend{i}")) for i in range(2)]
        qapp.setQuitOnLastWindowClosed(False)  # as the app: closing the window must not end the loop mid-cleanup
        loop = qasync.QEventLoop(qapp)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(asyncio.wait_for(scenario(qtbot, tmp_path, backends), SCENARIO_TIMEOUT_S))
        finally:
            loop.close()
            asyncio.set_event_loop(None)
            qapp.setQuitOnLastWindowClosed(True)


def test_the_backend_list_survives_a_restart_and_bad_lists_do_not(qtbot, no_user_config, tmp_path):
    from swarm_panel.ui.shell import cli_gui
    from swarm_panel.ui.shell.app_main import _opens_on_fleet, _settings
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    text = "vllm=http://gpu-box:8000/v1 key=sk-1 slots=64 weight=4\n# spare\nhttp://127.0.0.1:8081 name=local"
    store = SettingsStore(tmp_path / "panel.ini")
    window = MainWindow(fast_service(), store)
    qtbot.addWidget(window)
    window.engine_panel.backends.setPlainText(text)
    window.save_settings()

    again = SettingsStore(tmp_path / "panel.ini")
    settings = _settings(again, None, None, None, None)
    assert settings.backends == parse_backend_lines(text)
    assert settings.backends[0].api_key.get_secret_value() == "sk-1" and settings.backends[0].weight == 4
    assert not _opens_on_fleet(again, settings, None, None, None)  # it was not serving at the close
    reopened = MainWindow(fast_service(backends=settings.backends), again)
    qtbot.addWidget(reopened)
    assert parse_backend_lines(reopened.engine_panel.backends.toPlainText()) == settings.backends

    # An unfinished edit keeps what was remembered; a corrupt remembered list opens the panel without one.
    reopened.engine_panel.backends.setPlainText("http://ok:1\nbroken")
    reopened.save_settings()
    assert _settings(SettingsStore(tmp_path / "panel.ini"), None, None, None, None).backends == settings.backends
    again.set("backends", ["nope"])
    assert _settings(again, None, None, None, None).backends == []

    import argparse

    parser = argparse.ArgumentParser()
    cli_gui.register(parser.add_subparsers())
    args = parser.parse_args(["gui", "--backend", "vllm=http://a:8000", "--backend", "http://b:8001 weight=2"])
    assert [(b.kind, b.url, b.weight) for b in args.backends] == [("vllm", "http://a:8000", 1.0),
                                                                  ("auto", "http://b:8001", 2.0)]
    assert _opens_on_fleet(again, settings, None, None, args.backends)


@pytest.mark.parametrize("text, message", [
    ("", "list at least one backend"),
    ("http://a:1\nftp://b:2", "line 2: backend URL 'ftp://b:2' is not an http(s) URL"),
    ("http://a:1 weight=0", "line 1: weight: Input should be greater than 0"),
    ("http://a:1 colour=red", "line 1: 'colour=red' is not one of key=..., weight=..., slots=..., name=..."),
    ("http://a:1\nswarm-panel=http://a:1", "two backends are named 'a:1'"),
])
def test_a_bad_backend_list_gets_a_readable_message(text, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_backend_lines(text)
