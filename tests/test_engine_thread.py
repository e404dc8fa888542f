import threading

import pytest

from runtime.config import SchedulerConfig
from runtime.engine_thread import EngineThread
from runtime.modeled_engine import ModeledEngine
from runtime.profiles import RX_9070_XT_QWEN35_9B
from runtime.request import Request, SamplingParams
from runtime.scheduler import RequestRejected

FAST_CARD = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 1.0, "per_row_ms": 0.1})


def _collecting(request: Request, done: threading.Event, sink: list) -> Request:
    def listen(output):
        sink.append(output)
        if output.finished:
            done.set()

    request.listener = listen
    return request


@pytest.fixture
def engine_thread():
    thread = EngineThread(ModeledEngine(FAST_CARD, realtime=True), SchedulerConfig(policy="continuous"))
    thread.start()
    yield thread
    thread.stop()
    assert not thread.alive


def test_requests_complete_on_the_engine_thread_with_live_reconfiguration(engine_thread):
    events, outputs = [], []
    for i in range(12):
        done = threading.Event()
        events.append(done)
        outputs.append([])
        engine_thread.submit(_collecting(Request([1] * 8, SamplingParams(max_tokens=30 + i)), done, outputs[-1]))
        if i == 6:
            engine_thread.reconfigure(policy="naive", max_batch=4)
    assert all(e.wait(10) for e in events)
    for i, out in enumerate(outputs):
        assert sum(len(o.token_ids) for o in out) == 30 + i
    assert engine_thread.config.policy == "naive"
    snap = engine_thread.metrics.snapshot()
    assert snap.total_tokens == sum(30 + i for i in range(12))
    assert snap.policy == "naive"


def test_submit_rejects_what_can_never_fit_and_abort_reaches_the_thread(engine_thread):
    with pytest.raises(RequestRejected):
        engine_thread.submit(Request([1] * 10, SamplingParams(max_tokens=10**9)))
    done, out = threading.Event(), []
    request = _collecting(Request([1] * 8, SamplingParams(max_tokens=30_000)), done, out)
    engine_thread.submit(request)
    while not out:
        threading.Event().wait(0.01)
    engine_thread.abort(request.request_id)
    assert done.wait(5)
    assert out[-1].finish_reason == "abort"
    with pytest.raises(ValueError):
        engine_thread.reconfigure(policy="bogus")


def test_engine_exception_fails_in_flight_requests_and_the_thread_recovers():
    class Flaky(ModeledEngine):
        fail_next = True

        def step(self, plan):
            if plan.rows and self.fail_next:
                self.fail_next = False
                raise RuntimeError("device lost")
            return super().step(plan)

    thread = EngineThread(Flaky(FAST_CARD, realtime=True), SchedulerConfig())
    thread.start()
    try:
        done, out = threading.Event(), []
        thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=5)), done, out))
        assert done.wait(5)
        assert out[-1].finish_reason == "error" and "device lost" in out[-1].error
        done2, out2 = threading.Event(), []
        thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=5)), done2, out2))
        assert done2.wait(5)
        assert out2[-1].finish_reason == "length"
    finally:
        thread.stop()


def test_stop_fails_what_is_still_queued():
    thread = EngineThread(ModeledEngine(FAST_CARD, realtime=True), SchedulerConfig(max_batch=1))
    thread.start()
    done, out = threading.Event(), []
    thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=30_000)), done, out))
    thread.stop()
    assert done.is_set() and "shutting down" in out[-1].error


def test_idle_engine_metrics_show_what_is_held_now_and_rates_decay(engine_thread):
    done, out = threading.Event(), []
    engine_thread.submit(_collecting(Request([1] * 8, SamplingParams(max_tokens=20)), done, out))
    assert done.wait(5)
    busy = engine_thread.metrics.snapshot()
    assert busy.total_tokens == 20
    engine_thread.metrics.window_s = 0.2
    threading.Event().wait(0.5)
    idle = engine_thread.metrics.snapshot()
    assert idle.tok_s == 0 and idle.live_lanes == 0 and idle.kv_used == 0
    assert idle.total_tokens == 20 and [a.agent for a in idle.agents] == ["anonymous"]
