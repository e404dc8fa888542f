"""A backend SIGKILLed mid-stream behind the gateway: every client in flight on it gets its API's own typed error
and a proper end (chat: an error chunk then [DONE]; Responses: response.failed; Messages: the error event then
message_stop), a request answered whole gets a 502 of type server_error, and the SDKs raise a clean error."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import openai
import pytest

from tests.gateway_fleet import backend, gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LONG = 4000  # tokens no stream reaches before the kill: greedy, so the tiny model's reply never ends early
ASK = [{"role": "user", "content": "tell me"}]


async def raw_stream(client: httpx.AsyncClient, path: str, body: dict, started: asyncio.Event,
                     begun: set) -> list[tuple[str | None, str]]:
    """Every event the client receives, (event name, data), until the server ends the stream."""
    received, block = [], []
    async with client.stream("POST", path, json=body) as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            if line:
                block.append(line)
                continue
            if not block or all(part.startswith(":") for part in block):
                block = []
                continue
            fields = dict(part.split(": ", 1) for part in block if not part.startswith(":"))
            received.append((fields.get("event"), fields["data"]))
            block = []
            if len(received) >= 3:
                begun.add(path)
                started.set()
    return received


async def in_flight(url: str, kill) -> dict:
    bodies = {
        "/v1/chat/completions": {"model": "m", "messages": ASK, "max_tokens": LONG, "stream": True, "temperature": 0},
        "/v1/responses": {"model": "m", "input": "tell me", "max_output_tokens": LONG, "stream": True,
                          "temperature": 0},
        "/v1/messages": {"model": "m", "messages": ASK, "max_tokens": LONG, "stream": True, "temperature": 0},
    }
    begun: set = set()
    started = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=60) as client, \
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as oa, \
            anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0, timeout=60) as an:
        raw = {path: asyncio.create_task(raw_stream(client, path, body, started, begun))
               for path, body in bodies.items()}
        whole = asyncio.create_task(client.post("/v1/chat/completions", json={
            "model": "m", "messages": ASK, "max_tokens": LONG, "temperature": 0}))

        async def openai_sdk():
            stream = await oa.chat.completions.create(model="m", messages=ASK, max_tokens=LONG, stream=True,
                                                      temperature=0)
            async for _ in stream:
                begun.add("openai-sdk")
            return None

        async def anthropic_sdk():
            stream = await an.messages.create(model="m", messages=ASK, max_tokens=LONG, stream=True,
                                              extra_body={"temperature": 0})
            async for event in stream:
                if event.type == "content_block_delta":
                    begun.add("anthropic-sdk")
            return None

        sdks = [asyncio.create_task(openai_sdk()), asyncio.create_task(anthropic_sdk())]
        deadline = asyncio.get_running_loop().time() + 90
        while len(begun) < 5:
            assert asyncio.get_running_loop().time() < deadline, f"only {begun} streaming"
            for task in [*raw.values(), *sdks, whole]:
                if task.done():
                    task.result()  # a request that ended before the kill says why
                    raise AssertionError(f"a request ended before the kill: {task}")
            await asyncio.sleep(0.05)
        kill()
        results = {path: await task for path, task in raw.items()}
        results["whole"] = await whole
        results["sdk"] = await asyncio.gather(*sdks, return_exceptions=True)
        return results


def test_a_backend_killed_mid_stream_gives_every_client_a_typed_error_and_a_proper_end(tiny_model_path, tmp_path):
    with backend(tiny_model_path, tmp_path, "b0", 8) as (backend_url, proc), \
            gateway([backend_url], tmp_path) as (url, gateway_proc):
        results = asyncio.run(in_flight(url, proc.kill))

    chat = results["/v1/chat/completions"]
    assert chat[-1] == (None, "[DONE]")
    error = json.loads(chat[-2][1])["error"]
    assert error["type"] == "server_error" and error["code"] == "backend_failed"
    assert backend_url.removeprefix("http://") in error["message"] and "failed mid-stream" in error["message"]
    assert all("choices" in json.loads(data) for _, data in chat[:-2])  # whole chunks only, none cut in two

    responses = results["/v1/responses"]
    name, data = responses[-1]
    failed = json.loads(data)
    created = json.loads(responses[0][1])
    assert name == failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed" and failed["response"]["error"]["code"] == "server_error"
    assert failed["response"]["id"] == created["response"]["id"]
    assert failed["sequence_number"] == json.loads(responses[-2][1])["sequence_number"] + 1
    assert all(json.loads(data)["type"] == name for name, data in responses)

    messages = results["/v1/messages"]
    assert [name for name, _ in messages[-2:]] == ["error", "message_stop"]
    assert json.loads(messages[-2][1])["error"]["type"] == "api_error"

    whole = results["whole"]
    assert whole.status_code == 502 and whole.json()["error"]["type"] == "server_error"
    assert whole.json()["error"]["code"] == "backend_failed"

    openai_error, anthropic_error = results["sdk"]
    assert isinstance(openai_error, openai.APIError) and openai_error.type == "server_error"
    assert isinstance(anthropic_error, anthropic.APIStatusError)
    assert anthropic_error.body["error"]["type"] == "api_error"
    assert "failed mid-stream" in gateway_proc.text()
