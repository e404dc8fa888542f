"""The default split layout gives way to a request longer than a lane's share (a coding agent's first
prompt): the context turns unified between steps, live requests recompute, and nothing is refused or
lost. Over real HTTP on both architectures, greedy tokens checked against a fresh computation."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import httpx
import openai
import pytest

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineError, RelayoutKind
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama import context
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.model import ModelLoadError
from swarm_panel.runtime.scheduling.lanes import Settled
from swarm_panel.runtime.serving.engine_core import EngineThread
from tests.app.responses_api.test_responses_tools import CODEX_REQUEST
from tests.app.server.test_server_common import running, settings, wait_until

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow

NO_EOS = {"ignore_eos": True}
SHORT = [{"role": "user", "content": "count the lanes"}]
REPLY_TOKENS = 400


def _service(model_path, **overrides) -> SwarmService:
    # 8192 over 2 lanes is 4096 a lane: the auto layout is split.
    return SwarmService(settings(**({"engine": "llama", "model": model_path, "n_ctx": 8192, "n_batch": 256,
                                     "num_lanes": 2, "threads": 2, "extra_buffers": "off", "flash_attn": "off"}
                                    | overrides)))


def _long_prompt(service: SwarmService, tokens: int) -> str:
    words, text = 1, "lane"
    while len(service.engine.tokenizer.tokenize(text)) < tokens:
        words *= 2
        text = " ".join(["lane"] * words)
    return text


def _greedy(client: openai.OpenAI, messages, max_tokens: int) -> tuple[str, int, str]:
    reply = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, temperature=0,
                                           extra_body=NO_EOS)
    return reply.choices[0].message.content, reply.usage.completion_tokens, reply.choices[0].finish_reason


def test_a_prompt_past_a_lanes_share_widens_the_default_layout(arch_model_path, caplog):
    caplog.set_level(logging.INFO, logger="swarm_panel.runtime.serving.relayout")
    service = _service(arch_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=120) as client:
        described = service.meta()
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
        described = service.meta()
        assert described["kv_unified"] is True and "widened" in described["kv_layout"]
        assert service.engine.max_context == 8192
        took_over = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
        assert took_over == ["the new context took over 1 live requests (recomputing) and 0 waiting"]
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
                                    flash_attn="off", num_lanes=8))
    with running(service) as server:
        assert service.engine.facts.kv_layout == "split KV (4096 tokens a lane)"
        body["max_output_tokens"] = 16
        with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=120) as stream:
            assert stream.status_code == 200, stream.read()
            events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
        assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
        assert events[-1]["response"]["usage"]["input_tokens"] > 9000
        assert service.engine.facts.kv_unified is True


def test_a_chosen_split_layout_refuses_what_no_lane_holds(tiny_model_path):
    service = _service(tiny_model_path, kv_unified=False)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=60) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            _greedy(client, [{"role": "user", "content": _long_prompt(service, 5000)}], 8)
        assert "each lane's context holds 4096" in str(caught.value)
        assert service.engine.facts.kv_unified is False


def test_a_default_max_tokens_keeps_to_a_lanes_share(tiny_model_path):
    """A prompt a lane holds, with no max_tokens, is cut to the lane rather than widening the layout."""
    service = _service(tiny_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=60) as client:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                               temperature=0, extra_body=NO_EOS)
        assert reply.usage.completion_tokens == 4096 - reply.usage.prompt_tokens
        assert reply.choices[0].finish_reason == "length"
        assert service.engine.facts.kv_unified is False


def test_only_a_defaulted_layout_widens(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, flash_attn="off") as engine:
        assert engine.caps.widens_to == 0
        with pytest.raises(EngineError):
            engine.relayout(RelayoutKind.WIDEN, "a test")
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True,
                     flash_attn="off") as engine:
        assert (engine.caps.max_context, engine.caps.widens_to, engine.caps.consecutive_ids) == (4096, 8192, True)
        engine.relayout(RelayoutKind.WIDEN, "a test")
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
        make = context.new_context

        def refuse_unified(model, settings, layout, n_threads):
            if layout.kv_unified:
                raise ModelLoadError("cannot load model with n_ctx=8192: out of device memory (test)")
            return make(model, settings, layout, n_threads)

        monkeypatch.setattr(context, "new_context", refuse_unified)
        expected = _greedy(client, SHORT, 40)
        with pytest.raises(openai.BadRequestError) as caught:
            _greedy(client, [{"role": "user", "content": _long_prompt(service, 5000)}], 8)
        message = caught.value.body["message"]
        assert caught.value.body["code"] == "context_length_exceeded"
        assert "each lane's context holds 4096" in message and "out of device memory (test)" in message
        assert service.engine.facts.kv_layout == "split KV (4096 tokens a lane)"
        assert service.engine_thread.scheduler.caps.widens_to == 0
        assert _greedy(client, SHORT, 40) == expected


def test_a_widened_layout_narrows_back_and_can_widen_again(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True,
                     flash_attn="off") as engine:
        assert engine.caps.narrows_to == 0
        with pytest.raises(EngineError):
            engine.relayout(RelayoutKind.NARROW, "a test")
        engine.relayout(RelayoutKind.WIDEN, "a test")
        assert (engine.caps.max_context, engine.caps.narrows_to) == (8192, 4096)
        engine.relayout(RelayoutKind.NARROW, "after a test")
        caps = engine.caps
        assert (caps.max_context, caps.widens_to, caps.narrows_to, caps.consecutive_ids) == (4096, 8192, 0, True)
        # Split again: finished sequences stay in their streams, and go to host RAM only when evicted.
        assert caps.max_cached_sequences == 2 and caps.parks_evicted and not engine.parks_cached
        assert engine.facts.kv_layout == "split KV (4096 tokens a lane; back from unified after a test)"
        engine.relayout(RelayoutKind.WIDEN, "another test")
        assert (engine.caps.max_context, engine.caps.narrows_to) == (8192, 4096)


def _stream(client: openai.OpenAI, messages, max_tokens: int, reply: dict, started: threading.Event,
            after: int = 10) -> None:
    stream = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, temperature=0,
                                            stream=True, extra_body=NO_EOS, stream_options={"include_usage": True})
    parts = []
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            reply["finish"] = chunk.choices[0].finish_reason or reply.get("finish")
            if len(parts) >= after:
                started.set()
        if chunk.usage:
            reply["tokens"] = chunk.usage.completion_tokens
    reply["text"] = "".join(parts)


def test_a_widened_layout_turns_split_again_under_a_live_stream(arch_model_path, caplog):
    """Once no request has needed more than a lane for the quiet period, the layout turns split between
    two steps: the live stream recomputes on its lane and ends with the tokens a fresh server gives."""
    caplog.set_level(logging.INFO, logger="swarm_panel.runtime.serving.relayout")
    service = _service(arch_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=120) as client:
        thread = service.engine_thread
        _greedy(client, [{"role": "user", "content": _long_prompt(service, 5000)}], 8)
        assert service.engine.facts.kv_unified is True and thread.relayouts.narrow_after_s == 300
        reply: dict[str, object] = {}
        started = threading.Event()
        short = threading.Thread(target=_stream, args=(client, SHORT, REPLY_TOKENS, reply, started))
        short.start()
        assert started.wait(60), "the short request never streamed"
        thread.relayouts.narrow_after_s = 0.0  # the quiet period has passed
        short.join(120)
        assert reply["tokens"] == REPLY_TOKENS and reply["finish"] == "length"
        described = service.meta()
        assert described["kv_unified"] is False
        assert described["kv_layout"].startswith("split KV (4096 tokens a lane; back from unified after 0 s")
        took_over = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
        assert took_over[-1] == "the new context took over 1 live requests (recomputing) and 0 waiting"
        assert len(took_over) == 2
        assert (service.engine.max_context, thread.scheduler.caps.widens_to) == (4096, 8192)

    fresh = _service(arch_model_path, kv_unified=False, prefix_cache=False)
    with running(fresh) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                 timeout=120) as client:
        assert _greedy(client, SHORT, REPLY_TOKENS)[0] == reply["text"]


def test_a_long_request_keeps_the_layout_wide_until_it_ends(tiny_model_path):
    """Narrowing waits for every request that needs more than a lane (live or queued); after it, a
    request with no max_tokens keeps to a lane, and the next long one widens again."""
    service = _service(tiny_model_path)
    with running(service) as server, openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0,
                                                   timeout=120) as client:
        thread = service.engine_thread
        long_messages = [{"role": "user", "content": _long_prompt(service, 5000)}]
        reply: dict[str, object] = {}
        started = threading.Event()
        long = threading.Thread(target=_stream, args=(client, long_messages, 300, reply, started, 5))
        long.start()
        assert started.wait(60), "the long request never streamed"
        thread.relayouts.narrow_after_s = 0.0
        layouts = []
        while long.is_alive():
            layouts.append(service.engine.facts.kv_unified)
            long.join(0.05)
        assert reply["tokens"] == 300 and set(layouts) == {True}
        wait_until(lambda: service.engine.facts.kv_unified is False, what="the layout to turn split")
        # After a widening, a max_tokens the server chooses still keeps to a lane.
        thread.relayouts.narrow_after_s = 300.0
        _greedy(client, long_messages, 4)
        assert service.engine.facts.kv_unified is True
        plain = client.chat.completions.create(model="m", messages=SHORT, temperature=0, max_tokens=None,
                                               extra_body=NO_EOS)
        assert plain.usage.completion_tokens == 4096 - plain.usage.prompt_tokens
        thread.relayouts.narrow_after_s = 0.0
        wait_until(lambda: service.engine.facts.kv_unified is False, what="the layout to turn split again")
        # Held wide once the long request has widened it: with 0 s it may narrow before it is looked at.
        thread.relayouts.narrow_after_s = 300.0
        _greedy(client, long_messages, 4)
        assert service.engine.facts.kv_unified is True


def test_a_request_queued_as_the_layout_narrows_widens_it_again(tiny_model_path):
    """Between a long request's check and its arrival in the queue the layout may have turned split: it
    widens again rather than refusing a request it accepted."""
    service = _service(tiny_model_path, kv_narrow_after_s=0)
    with running(service):
        thread = service.engine_thread
        assert thread.relayouts.narrow_after_s is None
        done = []
        prompt = [1] + [100 + i % 50 for i in range(5000)]
        request = Request(prompt, SamplingParams(max_tokens=4, ignore_eos=True), listener=done.append)
        caps = thread.scheduler.caps
        # As if admission had settled it on the unified layout, which has narrowed since.
        settled = Settled(4, widens=False, long=True, caps=replace(caps, max_context=caps.widens_to, widens_to=0),
                          kv_budget=thread.scheduler.kv_budget)
        thread._post("add", (request, settled))
        wait_until(lambda: bool(done) and done[-1].finished, what="the long request to end")
        assert done[-1].error is None and request.num_output_tokens == 4
        assert service.engine.facts.kv_unified is True


def test_admission_settles_once_and_a_widening_is_published_with_its_outcome(tiny_model_path):
    """EngineThread.admit reads the snapshot's caps; the widening it asks for is in the next snapshot
    by the time its outcome is known, so the same request's submit finds it done and widens nothing."""
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True,
                     flash_attn="off") as engine:
        thread = EngineThread(engine, SchedulerConfig(num_lanes=2))
        thread.start()
        try:
            assert thread.snapshot().caps.widens_to == 8192
            settled, widening = thread.admit(5000, None)
            assert settled.widens and widening is not None and settled.max_tokens == 8192 - 5000
            # Read the moment the outcome is set, on the engine thread: the snapshot already has the new caps.
            seen: list[int] = []
            widening.add_done_callback(lambda _: seen.append(thread.snapshot().caps.widens_to))
            assert widening.result(timeout=60) is None
            assert seen == [0]
            assert (thread.snapshot().caps.max_context, thread.snapshot().caps.widens_to) == (8192, 0)
            again, none = thread.admit(5000, settled.max_tokens)
            assert (again.widens, none) == (False, None)
            short, _ = thread.admit(100, None)
            # A default max_tokens keeps to a lane's share while the layout is wide.
            assert short.max_tokens == 4096 - 100
        finally:
            thread.stop()
