import threading

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B
from swarm_panel.runtime.scheduling.lanes import RequestRejected
from swarm_panel.runtime.serving.engine_core import EngineThread

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
            engine_thread.reconfigure(policy="naive", num_lanes=4)
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
    thread = EngineThread(ModeledEngine(FAST_CARD, realtime=True), SchedulerConfig(num_lanes=1))
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


class _LockCheckedPending(EngineThread):
    """Records every change of the pending-adds count made without the lock held."""

    unlocked_changes: list[int]

    @property
    def _pending_adds(self) -> int:
        return self.__dict__["_pending"]

    @_pending_adds.setter
    def _pending_adds(self, value: int) -> None:
        if "_pending" in self.__dict__ and not self._lock.locked():
            self.unlocked_changes.append(value)
        self.__dict__["_pending"] = value


def test_pending_adds_change_only_under_the_lock():
    _LockCheckedPending.unlocked_changes = []
    thread = _LockCheckedPending(ModeledEngine(FAST_CARD, realtime=True), SchedulerConfig(num_lanes=2))
    thread.start()
    try:
        events = []
        for _ in range(6):
            done, out = threading.Event(), []
            events.append(done)
            thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=3)), done, out))
        assert all(e.wait(5) for e in events)
    finally:
        thread.stop()
    assert _LockCheckedPending.unlocked_changes == []
    assert thread.num_waiting == 0


def test_waiting_count_stays_exact_under_concurrent_submits(engine_thread):
    """Many threads submit while the engine drains: the count that feeds the 503 check ends at zero
    and never goes below zero on the way."""
    import sys

    per_thread, submitters = 40, 4
    events: list[threading.Event] = []
    lowest = [0]
    stop_watching = threading.Event()

    def watch() -> None:
        while not stop_watching.is_set():
            lowest[0] = min(lowest[0], engine_thread.num_waiting)

    def submit_many() -> None:
        for _ in range(per_thread):
            done, out = threading.Event(), []
            events.append(done)
            engine_thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=2)), done, out))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        watcher = threading.Thread(target=watch)
        watcher.start()
        workers = [threading.Thread(target=submit_many) for _ in range(submitters)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert all(e.wait(20) for e in events)
        stop_watching.set()
        watcher.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(events) == per_thread * submitters
    deadline = threading.Event()
    for _ in range(50):
        if engine_thread.num_waiting == 0:
            break
        deadline.wait(0.02)
    assert engine_thread.num_waiting == 0 and lowest[0] >= 0


def test_one_snapshot_per_step_and_one_sink_call_with_every_output_of_the_step(engine_thread):
    calls = []
    unsubscribe = engine_thread.subscribe(lambda outputs: calls.append([o.request_id for _, o in outputs]))
    events, requests = [], []
    for _ in range(4):
        done, out = threading.Event(), []
        events.append(done)
        requests.append(_collecting(Request([1] * 4, SamplingParams(max_tokens=20)), done, out))
    engine_thread.reconfigure(num_lanes=4)
    for request in requests:
        engine_thread.submit(request)
    assert all(e.wait(5) for e in events)
    unsubscribe()
    ids = {r.request_id for r in requests}
    assert all(len(call) == len(set(call)) for call in calls), "a request got two messages in one step"
    assert any(len(set(call) & ids) > 1 for call in calls), "outputs of one step were not delivered together"
    assert sum(call.count(r) for call in calls for r in ids) == sum(20 for _ in ids)
    snapshot = engine_thread.snapshot()
    with pytest.raises(AttributeError):
        snapshot.waiting = 3
    assert isinstance(snapshot.lanes, tuple) and snapshot.step >= 20


def test_busy_time_grows_while_a_step_is_stuck_in_the_engine():
    release = threading.Event()

    class Stuck(ModeledEngine):
        def step(self, plan):
            if plan.rows:
                release.wait(10)
            return super().step(plan)

    thread = EngineThread(Stuck(FAST_CARD, realtime=True), SchedulerConfig())
    thread.start()
    try:
        threading.Event().wait(0.3)
        assert thread.busy_s < 0.25  # idle: the thread comes up for air every IDLE_POLL_S
        done, out = threading.Event(), []
        thread.submit(_collecting(Request([1] * 4, SamplingParams(max_tokens=3)), done, out))
        threading.Event().wait(0.6)
        assert thread.busy_s >= 0.5
        release.set()
        assert done.wait(5)
        threading.Event().wait(0.05)
        assert thread.busy_s < 0.25 and thread.snapshot().step >= 3
    finally:
        release.set()
        thread.stop()
