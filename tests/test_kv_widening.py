"""The default split layout gives way to a request longer than a lane's share (a coding agent's first
prompt): the context turns unified between steps, live requests recompute, and nothing is refused or
lost. Over real HTTP on both architectures, greedy tokens checked against a fresh computation."""

from __future__ import annotations

import json
import logging
import threading

import httpx
import openai
import pytest

from app.service import SwarmService
from runtime.engine import EngineError
from runtime.llama_engine import LlamaEngine, ModelLoadError
from tests.test_responses_tools import CODEX_REQUEST
from tests.test_server_common import running, settings, wait_until

NO_EOS = {"ignore_eos": True}
SHORT = [{"role": "user", "content": "count the lanes"}]
REPLY_TOKENS = 400


def _service(model_path, **overrides) -> SwarmService:
    # 8192 over 2 lanes is 4096 a lane: the auto layout is split.
    return SwarmService(settings(**({"engine": "llama", "model": model_path, "n_ctx": 8192, "n_batch": 256,
                                     "max_batch": 2, "threads": 2, "extra_buffers": "off", "flash_attn": "off"}
                                    | overrides)))


def _long_prompt(service: SwarmService, tokens: int) -> str:
    words, text = 1, "lane"
    while len(service.engine.tokenize(text)) < tokens:
        words *= 2
        text = " ".join(["lane"] * words)
    return text


def _greedy(client: openai.OpenAI, messages, max_tokens: int) -> tuple[str, int, str]:
    reply = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, temperature=0,
                                           extra_body=NO_EOS)
    return reply.choices[0].message.content, reply.usage.completion_tokens, reply.choices[0].finish_reason


def test_a_prompt_past_a_lanes_share_widens_the_default_layout(arch_model_path, caplog):
    caplog.set_level(logging.INFO, logger="runtime.engine_thread")
    service = _service(arch_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=120) as client:
        described = service.describe()
        assert described["kv_unified"] is False and service.engine.max_context == 4096
        long_prompt = _long_prompt(service, 5000)
        short_reply: dict[str, object] = {}
        started = threading.Event()

        def stream_short() -> None:
            stream = client.chat.completions.create(model="m", messages=SHORT, max_tokens=REPLY_TOKENS,
                                                    temperature=0, stream=True, extra_body=NO_EOS,
                                                    stream_options={"include_usage": True})
            parts = []
            for chunk in stream:
                if chunk.choices:
                    parts.append(chunk.choices[0].delta.content or "")
                    short_reply["finish"] = chunk.choices[0].finish_reason or short_reply.get("finish")
                    if len(parts) >= 10:
                        started.set()
                if chunk.usage:
                    short_reply["tokens"] = chunk.usage.completion_tokens
            short_reply["text"] = "".join(parts)

        short = threading.Thread(target=stream_short)
        short.start()
        assert started.wait(60), "the short request never streamed"
        # Mid-decode, a prompt no split lane holds: it is served, and the live request recomputes.
        text, tokens, finish = _greedy(client, [{"role": "user", "content": long_prompt}], 8)
        short.join(120)
        assert (tokens, finish) == (8, "length")
        assert short_reply["tokens"] == REPLY_TOKENS and short_reply["finish"] == "length"
        described = service.describe()
        assert described["kv_unified"] is True and "widened" in described["kv_layout"]
        assert service.engine.max_context == 8192
        took_over = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
        assert took_over == ["the new KV layout took over 1 live requests (recomputing) and 0 waiting"]
        assert service.engine_thread.scheduler.caps.widens_to == 0
        wait_until(lambda: service.engine_thread.snapshot().running == 0, what="the engine to go idle")
        assert service.engine_thread.snapshot().waiting == 0
        widened_long = text

    # A fresh computation of both, on a layout chosen unified from the start, gives the same tokens.
    fresh = _service(arch_model_path, kv_unified=True, prefix_cache=False)
    with running(fresh) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                 timeout=120) as client:
        assert _greedy(client, SHORT, REPLY_TOKENS)[0] == short_reply["text"]
        assert _greedy(client, [{"role": "user", "content": long_prompt}], 8)[0] == widened_long


def test_a_codex_sized_first_prompt_is_served_with_the_default_settings(tiny_model_path):
    """Codex's first prompt is about 9k tokens, past a lane's 4,096 of the default 32768 over 8 lanes:
    its captured request, its developer text made that long, is served, not refused."""
    body = json.loads(CODEX_REQUEST.read_text())
    body["input"][0]["content"][0]["text"] = " ".join(["lane"] * 1500)  # 6 tokens a word here
    service = SwarmService(settings(engine="llama", model=tiny_model_path, threads=2, extra_buffers="off",
                                    flash_attn="off", max_batch=8))
    with running(service) as server:
        assert service.describe()["kv_layout"] == "split KV (4096 tokens a lane)"
        body["max_output_tokens"] = 16
        with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=120) as stream:
            assert stream.status_code == 200, stream.read()
            events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
        assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
        assert events[-1]["response"]["usage"]["input_tokens"] > 9000
        assert service.describe()["kv_unified"] is True


def test_a_chosen_split_layout_refuses_what_no_lane_holds(tiny_model_path):
    service = _service(tiny_model_path, kv_unified=False)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=60) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            _greedy(client, [{"role": "user", "content": _long_prompt(service, 5000)}], 8)
        assert "each lane's context holds 4096" in str(caught.value)
        assert service.describe()["kv_unified"] is False


def test_a_default_max_tokens_keeps_to_a_lanes_share(tiny_model_path):
    """A prompt a lane holds, with no max_tokens, is cut to the lane rather than widening the layout."""
    service = _service(tiny_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=60) as client:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                               temperature=0, extra_body=NO_EOS)
        assert reply.usage.completion_tokens == 4096 - reply.usage.prompt_tokens
        assert reply.choices[0].finish_reason == "length"
        assert service.describe()["kv_unified"] is False


def test_only_a_defaulted_layout_widens(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, flash_attn="off") as engine:
        assert engine.caps.widens_to == 0
        with pytest.raises(EngineError):
            engine.widen("a test")
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True,
                     flash_attn="off") as engine:
        assert (engine.caps.max_context, engine.caps.widens_to, engine.caps.consecutive_ids) == (4096, 8192, True)
        engine.widen("a test")
        caps = engine.caps
        assert (caps.max_context, caps.widens_to, caps.consecutive_ids) == (8192, 0, False)
        assert caps.max_cached_sequences == 2 and caps.parked is not None


def test_a_widening_llama_cpp_cannot_make_keeps_split_and_fails_only_the_long_request(tiny_model_path,
                                                                                      monkeypatch):
    """Where the unified context cannot be made (memory, on a card), the split one comes back: the
    request that needed more gets a clear error, the live one recomputes and ends as it would have."""
    service = _service(tiny_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=60) as client:
        engine = service.engine
        make = engine._new_context

        def refuse_unified(n_seq_max, n_ctx, n_batch):
            if engine.kv_unified:
                raise ModelLoadError("cannot load model with n_ctx=8192: out of device memory (test)")
            return make(n_seq_max, n_ctx, n_batch)

        monkeypatch.setattr(engine, "_new_context", refuse_unified)
        expected = _greedy(client, SHORT, 40)
        with pytest.raises(openai.BadRequestError) as caught:
            _greedy(client, [{"role": "user", "content": _long_prompt(service, 5000)}], 8)
        message = caught.value.body["message"]
        assert caught.value.body["code"] == "context_length_exceeded"
        assert "each lane's context holds 4096" in message and "out of device memory (test)" in message
        assert service.describe()["kv_layout"] == "split KV (4096 tokens a lane)"
        assert service.engine_thread.scheduler.caps.widens_to == 0
        assert _greedy(client, SHORT, 40) == expected
