"""A whole reply waits on the client's disconnect message beside its work (swarm_panel.app.endpoint.wire.unless_hung_up)."""

from __future__ import annotations

import asyncio

import pytest

from swarm_panel.app.endpoint.wire import ClientGone, unless_hung_up


def receiver(*messages: dict):
    """An ASGI receive that hands out `messages` in turn, then never returns (the client stays)."""
    queue = list(messages)

    async def receive() -> dict:
        if queue:
            await asyncio.sleep(0.01)
            return queue.pop(0)
        await asyncio.Event().wait()

    return receive


def test_the_work_result_comes_back_while_the_client_stays():
    async def work() -> str:
        await asyncio.sleep(0.02)
        return "done"

    assert asyncio.run(unless_hung_up(receiver(), work())) == "done"


def test_a_hang_up_cancels_the_work_and_raises_client_gone():
    cancelled = []

    async def work() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        started = asyncio.get_running_loop().time()
        with pytest.raises(ClientGone):
            # Messages other than the disconnect (a late body part) do not end the wait.
            await unless_hung_up(receiver({"type": "http.request", "body": b""}, {"type": "http.disconnect"}), work())
        assert asyncio.get_running_loop().time() - started < 5
        await asyncio.sleep(0)
        assert cancelled == [True]

    asyncio.run(main())


def test_the_work_failing_raises_its_own_error():
    async def work() -> None:
        raise ValueError("engine said no")

    with pytest.raises(ValueError, match="engine said no"):
        asyncio.run(unless_hung_up(receiver(), work()))
