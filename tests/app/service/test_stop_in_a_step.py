"""Stopping the service while its engine thread is inside a step: the engine is closed after that step, never
under it (on a device, a first step compiling its shaders outlasted the wait, and the close crashed the step)."""

from __future__ import annotations

import logging
import threading

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.core.request import Request, SamplingParams


def test_an_engine_inside_a_step_is_closed_after_the_step_not_under_it(caplog):
    service = SwarmService(Settings(engine="modeled", port=0))
    service.start()
    engine, thread = service.engine, service.engine_thread._thread
    entered, release = threading.Event(), threading.Event()
    step, close = engine.step, engine.close
    closed_in_step: list[bool] = []

    def slow_step(plan):
        entered.set()
        release.wait(30)
        return step(plan)

    def watched_close():
        closed_in_step.append(entered.is_set() and not release.is_set())
        close()

    engine.step, engine.close = slow_step, watched_close
    service.engine_thread.submit(Request([1] * 4, SamplingParams(max_tokens=2)))
    assert entered.wait(10)
    with caplog.at_level(logging.ERROR, logger="swarm_panel.runtime.serving.engine_core"):
        service.stop(wait_s=0.2)
    assert closed_in_step == [], "the engine was closed while its thread was inside a step"
    assert "still inside a step" in caplog.text
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert closed_in_step == [False], "the thread did not close the engine after its step"


def test_an_idle_engine_is_closed_by_stop():
    service = SwarmService(Settings(engine="modeled", port=0))
    service.start()
    engine = service.engine
    closes: list[bool] = []
    close = engine.close
    engine.close = lambda: closes.append(True) or close()
    service.stop()
    assert closes == [True]
