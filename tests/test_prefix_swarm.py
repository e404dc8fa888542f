"""The multi-turn swarm over HTTP: each turn resends the agent's growing messages list."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from app.swarm import SwarmConfig, run_swarm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_openai(received: list[dict]) -> Starlette:
    """Streams one fixed reply per request, like any OpenAI-compatible server, and keeps the bodies."""

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        received.append(body)
        turn = sum(m["role"] == "assistant" for m in body["messages"])

        async def events():
            for piece in (f"reply {turn} ", f"of {body['user']}"):
                yield "data: " + json.dumps({"choices": [{"delta": {"content": piece}}]}) + "\n\n"
            usage = {"prompt_tokens": 100 + turn, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 90}}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_turns_resend_the_growing_conversation_with_a_shared_system_prompt():
    received: list[dict] = []
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(_fake_openai(received), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        config = SwarmConfig(url=f"http://127.0.0.1:{port}/v1", agents=2, turns=3, system_tokens=50, tool_tokens=10,
                             lengths=(4,))
        report = asyncio.run(run_swarm(config))
    finally:
        server.should_exit = True
        thread.join(5)
    assert report.requests == 6 and report.errors == 0
    assert report.prompt_tokens == 2 * (100 + 101 + 102) and report.cached_tokens == 6 * 90
    by_agent: dict[str, list[list[dict]]] = {}
    for body in received:
        by_agent.setdefault(body["user"], []).append(body["messages"])
    systems = {turns[0][0]["content"] for turns in by_agent.values()}
    assert len(systems) == 1 and len(next(iter(systems))) == 200  # one system prompt shared by all
    for agent, turns in by_agent.items():
        assert [len(m) for m in turns] == [2, 4, 6]
        for earlier, later in zip(turns, turns[1:]):
            assert later[: len(earlier)] == earlier  # each turn extends the previous one
        assert turns[2][2] == {"role": "assistant", "content": f"reply 0 of {agent}"}
        assert turns[2][3]["role"] == "user" and turns[2][3]["content"].startswith("Tool result")
