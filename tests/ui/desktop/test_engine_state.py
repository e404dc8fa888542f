"""The engine's state as the desktop shows it, read from a real service: serving, a crashed thread, a failed step
(news, no state), stopped; each change the user would want told, told once."""

from __future__ import annotations

import time

import pytest

from swarm_panel.ui.desktop.engine_state import CRASHED, LOADING, SERVING, STOPPED, EngineWatch, read
from tests.ui.test_ui_common import fast_service


def wait_for(condition, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_loading_serving_a_failed_step_and_a_stop_are_told():
    service = fast_service()
    watch = EngineWatch()
    assert watch.update(read(service, loading=True, fleet=False)) == []  # the first reading is no change
    assert watch.last.state == LOADING
    service.start()
    try:
        assert watch.update(read(service, False, False)) == [] and watch.last.state == SERVING
        thread = service.engine_thread
        step = thread.core.step
        failures = []

        def fail_once():
            if not failures:
                failures.append(1)
                raise RuntimeError("a broken kernel")
            return step()

        thread.core.step = fail_once
        wait_for(lambda: thread.error_count == 1, "the failed step")
        notices = watch.update(read(service, False, False))
        assert [n.title for n in notices] == ["The engine failed a step"] and watch.last.state == SERVING
        assert watch.update(read(service, False, False)) == []  # told once
    finally:
        service.stop()
    notices = watch.update(read(service, False, False))
    assert watch.last.state == STOPPED and [n.title for n in notices] == ["The engine stopped"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_dies_while_loaded_is_a_crash():
    service = fast_service()
    service.start()
    watch = EngineWatch()
    watch.update(read(service, False, False))
    thread = service.engine_thread

    def broken_publish():
        raise RuntimeError("the snapshot broke")

    thread._publish = broken_publish  # outside the step's guard: the thread ends
    try:
        wait_for(lambda: not thread.alive, "the thread to end")
        notices = watch.update(read(service, False, False))
        assert watch.last.state == CRASHED and [n.title for n in notices] == ["The engine crashed"]
        assert "thread ended" in notices[0].body
    finally:
        service.stop()


def test_an_engine_that_did_not_load_reads_as_crashed_with_the_reason():
    service = fast_service()
    service.engine_factory = lambda settings: (_ for _ in ()).throw(ValueError("no such model file"))
    watch = EngineWatch()
    watch.update(read(service, True, False))
    with pytest.raises(ValueError):
        service.start()
    notices = watch.update(read(service, False, False))
    assert watch.last.state == CRASHED and "no such model file" in notices[0].body
