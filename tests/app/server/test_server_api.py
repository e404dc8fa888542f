"""The endpoint through the official openai client (sync and async, streamed and not) on a real port."""

from __future__ import annotations

import asyncio
import threading

import httpx
import openai
import pytest

from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B
from tests.app.server.test_server_common import idle, modeled_service, running, wait_until

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Plan the edit."}]


@pytest.fixture(scope="module")
def server():
    service = modeled_service()
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as c:
        yield c


def test_chat_non_stream_honours_max_tokens_exactly(client):
    result = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=17, temperature=0)
    choice = result.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert len(choice.message.content.split()) == 17  # the modeled engine's tokens are one word each
    assert result.usage.completion_tokens == 17
    assert result.usage.total_tokens == result.usage.prompt_tokens + 17
    assert result.object == "chat.completion" and result.id.startswith("chatcmpl-")
    assert result.model == RX_9070_XT_QWEN35_9B.model


def test_developer_role_and_text_parts_are_accepted(client):
    messages = [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": " there"}]}]
    assert client.chat.completions.create(model="m", messages=messages, max_tokens=3).usage.completion_tokens == 3


def test_max_completion_tokens_wins_over_max_tokens(client):
    result = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=30,
                                            max_completion_tokens=9)
    assert result.usage.completion_tokens == 9


def test_chat_stream_with_usage(client):
    stream = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=23, stream=True,
                                            stream_options={"include_usage": True}, seed=7, top_p=0.9,
                                            presence_penalty=0.5, frequency_penalty=-0.5, stop=["zzz"],
                                            logit_bias={"5": -100})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 23
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 23
    assert all(c.usage is None for c in chunks[:-1])


def test_raw_sse_ends_with_done(server):
    body = {"messages": MESSAGES, "max_tokens": 5, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line for line in resp.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"


def test_completions_non_stream_stream_and_echo(client):
    result = client.completions.create(model="any", prompt="def add(a, b):", max_tokens=12)
    assert result.choices[0].finish_reason == "length"
    assert result.usage.completion_tokens == 12
    assert len(result.choices[0].text.split()) == 12
    echoed = client.completions.create(model="any", prompt="hello", max_tokens=2, echo=True)
    assert echoed.choices[0].text.startswith("hello")
    chunks = list(client.completions.create(model="any", prompt=[1, 5, 9], max_tokens=8, stream=True,
                                            stream_options={"include_usage": True}))
    assert len("".join(c.choices[0].text for c in chunks if c.choices).split()) == 8
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == 3


def test_async_client_streamed_and_not(server):
    async def main():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as c:
            whole = await c.chat.completions.create(model="any", messages=MESSAGES, max_tokens=11)
            stream = await c.chat.completions.create(model="any", messages=MESSAGES, max_tokens=13, stream=True,
                                                     stream_options={"include_usage": True})
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
            return whole.usage.completion_tokens, usage.completion_tokens

    assert asyncio.run(main()) == (11, 13)


def test_models_and_health(client, server):
    models = client.models.list().data
    assert len(models) == 1 and models[0].id == RX_9070_XT_QWEN35_9B.model
    assert models[0].model_extra["meta"]["engine"] == "modeled"
    assert client.models.retrieve(models[0].id).id == models[0].id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["model"] == RX_9070_XT_QWEN35_9B.model
    assert health["steps"] >= 0 and 0 <= health["engine_busy_s"] < 5


def test_agent_identity_from_user_then_header_then_anonymous(server):
    service = server.service
    seen: dict[str, str] = {}
    bodies = {
        "by-user": ({"user": "planner"}, {"X-Agent-Name": "ignored"}),
        "by-header": ({}, {"X-Agent-Name": "reviewer"}),
        "nobody": ({}, {}),
    }

    def send(key: str) -> None:
        extra, headers = bodies[key]
        body = {"messages": MESSAGES, "max_tokens": 400} | extra
        httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=30)

    threads = [threading.Thread(target=send, args=(k,)) for k in bodies]
    for t in threads:
        t.start()
    wait_until(lambda: len(service.inflight.snapshot()) == 3, what="three agents in flight")
    seen = service.inflight.snapshot()
    lanes = {lane.agent for lane in service.engine_thread.lanes() if lane.agent}
    for t in threads:
        t.join()
    assert seen == {"planner": 1, "reviewer": 1, "anonymous": 1}
    assert lanes <= {"planner", "reviewer", "anonymous"}
    assert service.inflight.snapshot() == {}


def test_default_max_tokens_is_the_rest_of_a_small_context():
    card = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 0.2, "per_row_ms": 0.0, "max_context": 64})
    service = modeled_service(card)
    with running(service) as srv:
        r = httpx.post(f"{srv.url}/v1/chat/completions",
                       json={"messages": [{"role": "user", "content": "hi"}]}).json()
    assert r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] == 64
    assert r["choices"][0]["finish_reason"] == "length"


def test_client_hang_up_mid_stream_aborts_and_frees_the_lane(server):
    service = server.service
    wait_until(lambda: idle(service), what="an idle engine")
    body = {"messages": MESSAGES, "max_tokens": 20_000, "stream": True, "user": "quitter"}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as resp:
        lines = resp.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert all(line.startswith("data: ") or not line for line in got)
        assert any(lane.agent == "quitter" for lane in service.engine_thread.lanes())
    # Closed early: the server aborts the request, the lane and its KV go at the next step.
    wait_until(lambda: idle(service), timeout=5, what="the lane and KV to be freed")
    wait_until(lambda: service.inflight.snapshot() == {}, timeout=5, what="the agent to leave")


def test_client_hang_up_on_a_non_stream_request_aborts_it(server):
    service = server.service
    wait_until(lambda: idle(service), what="an idle engine")
    body = {"messages": MESSAGES, "max_tokens": 20_000, "user": "impatient"}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=0.5)
    wait_until(lambda: idle(service), timeout=5, what="the abandoned request to be aborted")
    assert service.inflight.snapshot() == {}
