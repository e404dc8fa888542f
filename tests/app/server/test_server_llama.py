"""The tiny random-weight llama model over HTTP: real tokenizer, real chat template, real KV."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from swarm_panel.app.service.engine_service import SwarmService
from tests.app.server.test_server_common import idle, running, settings, wait_until

NO_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module")
def llama(tiny_model_path):
    service = SwarmService(settings(engine="llama", model=tiny_model_path, n_ctx=2048, n_batch=256, num_lanes=4,
                                    threads=2))
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.fixture(scope="module")
def client(llama):
    with openai.OpenAI(base_url=f"{llama.url}/v1", api_key="x", max_retries=0, timeout=60) as c:
        yield c


def test_chat_non_stream_exact_tokens(client, llama):
    result = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello world"}],
                                            max_tokens=12, temperature=0, extra_body=NO_EOS)
    assert result.usage.completion_tokens == 12
    assert result.choices[0].finish_reason == "length"
    assert isinstance(result.choices[0].message.content, str)
    assert result.model == llama.service.engine.facts.name


def test_concurrent_streams_with_usage(llama):
    async def one(c: openai.AsyncOpenAI, n: int) -> tuple[int, str]:
        stream = await c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"count to {n}"}], max_tokens=n, stream=True,
            stream_options={"include_usage": True}, temperature=0.8, seed=n, extra_body=NO_EOS)
        usage, finish = None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return usage.completion_tokens, finish

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{llama.url}/v1", api_key="x", max_retries=0, timeout=60) as c:
            return await asyncio.gather(*(one(c, n) for n in (5, 9, 14, 20, 26, 33)))

    assert asyncio.run(main()) == [(n, "length") for n in (5, 9, 14, 20, 26, 33)]


def test_logit_bias_reaches_the_sampler(client, llama):
    (token,) = llama.service.engine.tokenizer.tokenize("hello", add_special=False)
    result = client.completions.create(model="tiny", prompt="the agent", max_tokens=6, temperature=0,
                                       logit_bias={str(token): 100}, extra_body=NO_EOS)
    assert result.usage.completion_tokens == 6
    assert result.choices[0].text.split() == ["hello"] * 6


def test_tools_and_tool_results_go_through_the_real_template(client):
    tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                               "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "what is in a.py"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hello world')"},
    ]
    result = client.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=5,
                                            extra_body=NO_EOS)
    assert result.usage.completion_tokens == 5
    # The template put the tool list and the result into the prompt: far longer than the bare chat.
    bare = client.chat.completions.create(model="tiny", messages=messages[:2], max_tokens=1, extra_body=NO_EOS)
    assert result.usage.prompt_tokens > bare.usage.prompt_tokens + 40


def test_hang_up_mid_stream_frees_the_llama_kv(llama):
    service = llama.service
    wait_until(lambda: idle(service), what="an idle engine")
    body = {"messages": [{"role": "user", "content": "go on"}], "max_tokens": 1500, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{llama.url}/v1/chat/completions", json=body, timeout=30) as resp:
        lines = resp.iter_lines()
        for _ in range(8):
            next(lines)
        assert max(service.engine.lane_kv_positions()) > 0
    wait_until(lambda: idle(service), timeout=10, what="the aborted request's lane")
    wait_until(lambda: max(service.engine.lane_kv_positions()) == -1, timeout=10, what="llama.cpp KV to be freed")


def test_a_prompt_past_a_split_lanes_share_says_how_to_give_it_more(tiny_model_path):
    from swarm_panel.app.service.engine_service import SwarmService
    from tests.app.server.test_server_common import assert_error, running, settings

    service = SwarmService(settings(engine="llama", model=tiny_model_path, n_ctx=1024, num_lanes=4, threads=1,
                                    kv_unified=False, extra_buffers="off", flash_attn="off"))
    with running(service) as srv:
        answer = httpx.post(f"{srv.url}/v1/completions", json={"prompt": [20 + i % 300 for i in range(600)], "max_tokens": 1},
                            timeout=30)
        error = assert_error(answer, 400, code="context_length_exceeded", param="prompt")
        assert "each lane's context holds 256 (split KV: n_ctx 1024 over 4 lanes)" in error["message"]
        assert "--num-lanes" in error["message"] and "--kv-unified" in error["message"]
