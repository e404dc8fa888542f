"""swarm_panel.app.endpoint.chat_run: an engine step's outputs reach the event loop in one wake-up, streams intact."""

from __future__ import annotations

import asyncio

from swarm_panel.app.endpoint.chat_run import OutputRouter, RequestHandle
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.serving.engine_core import EngineThread
from tests.runtime.serving.test_engine_thread import FAST_CARD


def test_one_loop_wake_up_per_step_carries_every_stream():
    thread = EngineThread(ModeledEngine(FAST_CARD, realtime=True), SchedulerConfig(num_lanes=4))
    thread.start()
    finished: list[tuple[int, str | None]] = []

    class Observer:
        def finished(self, prompt_tokens: int, completion_tokens: int, reason: str | None) -> None:
            finished.append((completion_tokens, reason))

    async def main():
        loop = asyncio.get_running_loop()
        wake_ups: list[list[int]] = []
        real = loop.call_soon_threadsafe

        def counting(callback, *args):
            wake_ups.append([o.request_id for o in args[0]] if args else [])
            return real(callback, *args)

        loop.call_soon_threadsafe = counting
        router = OutputRouter(thread, loop)
        handles = [RequestHandle(Request([1] * 4, SamplingParams(max_tokens=20)), router, Observer())
                   for _ in range(4)]
        for handle in handles:
            handle.submit()
        batches = await asyncio.gather(*(_batches(h) for h in handles))
        router.close()
        return wake_ups, handles, batches

    try:
        wake_ups, handles, batches = asyncio.run(main())
    finally:
        thread.stop()
    ids = {h.request_id for h in handles}
    routed = [w for w in wake_ups if set(w) & ids]
    assert all(len(w) == len(set(w)) for w in routed), "a request got two messages in one wake-up"
    assert sum(len(w) for w in routed) == 4 * 20
    assert len(routed) < 4 * 20 and max(len(w) for w in routed) > 1, "outputs were not batched per step"
    for handle, got in zip(handles, batches, strict=True):
        assert handle.finished and handle.finish_reason == "length" and handle.completion_tokens == 20
        assert sum(len(o.token_ids) for batch in got for o in batch) == 20 and got[-1][-1].finished
    assert finished == [(20, "length")] * 4


async def _batches(handle: RequestHandle) -> list:
    return [batch async for batch in handle.batches()]
