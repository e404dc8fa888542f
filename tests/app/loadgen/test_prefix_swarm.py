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

from swarm_panel.app.loadgen.swarm import SwarmConfig, run_swarm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_openai(received: list[dict], first_token_delay: dict[str, float] | None = None) -> Starlette:
    """Streams one fixed reply per request, like any OpenAI-compatible server, and keeps the bodies."""

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        received.append(body | {"_received_at": time.monotonic()})
        turn = sum(m["role"] == "assistant" for m in body["messages"])

        async def events():
            await asyncio.sleep((first_token_delay or {}).get(body["user"], 0.0))
            for piece in (f"reply {turn} ", f"of {body['user']}"):
                yield "data: " + json.dumps({"choices": [{"delta": {"content": piece}}]}) + "\n\n"
            usage = {"prompt_tokens": 100 + turn, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 90}}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _swarm_against_fake(config: dict, received: list[dict], first_token_delay: dict[str, float] | None = None):
    port = _free_port()
    app = _fake_openai(received, first_token_delay)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        return asyncio.run(run_swarm(SwarmConfig(url=f"http://127.0.0.1:{port}/v1", **config)))
    finally:
        server.should_exit = True
        thread.join(5)


def test_turns_resend_the_growing_conversation_with_a_shared_system_prompt():
    received: list[dict] = []
    report = _swarm_against_fake(dict(agents=2, turns=3, system_tokens=50, tool_tokens=10, lengths=(4,)), received)
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


def test_the_first_agent_can_paste_long_prompts_and_the_others_figures_are_kept_apart():
    received: list[dict] = []
    report = _swarm_against_fake(dict(agents=3, requests_per_agent=2, prompt_tokens=32, long_prompt_tokens=400,
                                      lengths=(4,)), received, first_token_delay={"agent-01": 0.3})
    assert report.requests == 6 and report.errors == 0
    sizes = {body["user"]: len(body["messages"][-1]["content"]) for body in received}
    assert sizes == {"agent-01": 1600, "agent-02": 128, "agent-03": 128}
    # The long prompt's slow first tokens count in the whole swarm's TTFT, not in the others'.
    assert report.ttft_p95 >= 0.3
    assert report.short_prompts["ttft_p95"] < 0.3 and report.short_prompts["latency_p95"] < 0.3


def test_follow_up_turns_report_the_prompt_tokens_the_server_computed():
    received: list[dict] = []
    report = _swarm_against_fake(dict(agents=2, turns=3, tool_tokens=10, lengths=(4,)), received)
    # The fake computes prompt - 90 cached: 11 and 12 on each agent's turns 2 and 3; turn 1 is no follow-up.
    assert report.requests == 6
    assert report.follow_up_computed_p50 in (11, 12) and report.follow_up_computed_p95 == 12


def test_a_harness_system_prompt_is_sent_exactly_and_tools_run_between_turns():
    received: list[dict] = []
    started = time.monotonic()
    report = _swarm_against_fake(dict(agents=3, turns=3, tool_tokens=10, lengths=(4,), system_prompt="HARNESS HEAD",
                                      tool_seconds=(0.2, 0.4)), received)
    assert report.errors == 0 and report.requests == 9
    assert {body["messages"][0]["content"] for body in received} == {"HARNESS HEAD"}
    # Two tool runs of 0.2-0.4 s per agent, after turns 1 and 2 (none after the last).
    assert time.monotonic() - started >= 0.4
    for agent in {body["user"] for body in received}:
        at = [body["_received_at"] for body in received if body["user"] == agent]
        assert len(at) == 3 and all(later - earlier >= 0.2 for earlier, later in zip(at, at[1:]))


def test_a_tool_time_range_must_be_a_range():
    import pytest

    with pytest.raises(ValueError, match="tool_seconds"):
        SwarmConfig(url="http://x", turns=2, tool_seconds=(0.5, 0.1))
