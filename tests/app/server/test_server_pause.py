"""Pause new requests: a generation arriving while paused waits at the door, not failed; reads answer; Resume lets it
in; a stop does not wait on what is held."""

from __future__ import annotations

import asyncio

import httpx

from swarm_panel.app.server.http_server import HttpServer
from tests.ui.test_ui_common import fast_service


def test_a_paused_endpoint_holds_new_generations_until_resumed():
    service = fast_service(policy="continuous")
    service.start()

    async def scenario():
        http = HttpServer(service, port=0)
        await http.start()
        try:
            async with httpx.AsyncClient(base_url=http.url, timeout=30) as client:
                http.pause()
                assert http.paused
                asking = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}))
                while http.held == 0:
                    await asyncio.sleep(0.01)
                assert (await client.get("/health")).status_code == 200  # reads answer while paused
                await asyncio.sleep(0.3)
                assert not asking.done() and http.held == 1
                http.resume()
                reply = await asking
                assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
                assert http.held == 0 and not http.paused

                http.pause()
                waiting = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}))
                while http.held == 0:
                    await asyncio.sleep(0.01)
        finally:
            await http.stop()
        done, _ = await asyncio.wait([waiting], timeout=10)
        assert done, "a request held at the door outlived the server"

    try:
        asyncio.run(scenario())
    finally:
        service.stop()
