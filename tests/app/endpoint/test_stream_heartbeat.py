"""A streamed reply that is quiet (queued, or a long prompt computing) sends keep-alives in each API's shape.

Agents' idle watchdogs (Claude Code's, Codex's) hang up on a stream that sends nothing for five
minutes and resend the whole request; here one lane is busy with another reply, so each stream waits
behind it on the real bundled model and must carry beats until its own tokens come.
"""

from __future__ import annotations

import asyncio
import json
import threading

import anthropic
import httpx
import openai
import pytest

from swarm_panel.app.endpoint.wire import KEEPALIVE, relayed_with_heartbeat, with_heartbeat
from swarm_panel.app.service.engine_service import SwarmService
from tests.app.server.test_server_common import running, settings, wait_until

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow

BEAT_S = 0.1


async def _slow(log: list[str]):
    try:
        yield b"a"
        await asyncio.sleep(0.45)
        yield b"b"
    finally:
        log.append("closed")


def _collect(every_s: float, log: list[str], take: int | None = None) -> list[bytes]:
    async def run() -> list[bytes]:
        out = []
        stream = with_heartbeat(_slow(log), every_s, lambda: b"beat")
        async for chunk in stream:
            out.append(chunk)
            if take is not None and len(out) == take:
                break
        await stream.aclose()
        return out

    return asyncio.run(run())


def test_beats_fill_only_the_quiet_gaps():
    log: list[str] = []
    out = _collect(0.1, log)
    assert out[0] == b"a" and out[-1] == b"b"
    assert 3 <= out.count(b"beat") <= 5 and len(out) == out.count(b"beat") + 2
    assert log == ["closed"]


def test_no_beats_when_turned_off():
    log: list[str] = []
    assert _collect(0, log) == [b"a", b"b"]


def test_a_consumer_leaving_mid_wait_closes_the_source():
    log: list[str] = []
    assert _collect(0.1, log, take=2) == [b"a", b"beat"]
    assert log == ["closed"]


@pytest.fixture(scope="module")
def one_lane(real_model_path):
    service = SwarmService(settings(engine="llama", model=real_model_path, n_ctx=2048, n_batch=256, num_lanes=1,
                                    threads=1, stream_heartbeat_s=BEAT_S))
    with running(service) as srv:
        yield srv


def _behind_a_long_reply(server, stream) -> object:
    """Runs `stream()` while the one lane is busy generating another reply, and returns what it returned."""
    busy = threading.Thread(target=lambda: httpx.post(
        f"{server.url}/v1/completions", json={"prompt": "Count:", "max_tokens": 160, "ignore_eos": True,
                                              "temperature": 0}, timeout=120))
    busy.start()
    wait_until(lambda: httpx.get(f"{server.url}/v1/scheduler", timeout=5).json()["running"] == 1, what="busy lane")
    try:
        return stream()
    finally:
        busy.join()


def test_a_queued_chat_stream_carries_comments_the_sdk_skips(one_lane):
    def stream():
        with httpx.stream("POST", f"{one_lane.url}/v1/chat/completions", timeout=120, json={
                "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "stream": True}) as r:
            return r.read()

    events = [e + b"\n\n" for e in _behind_a_long_reply(one_lane, stream).split(b"\n\n") if e]
    first_token = next(i for i, e in enumerate(events) if e.startswith(b"data: {") and
                       json.loads(e[6:])["choices"] and json.loads(e[6:])["choices"][0]["delta"].get("content"))
    assert events[:first_token].count(KEEPALIVE) >= 2, events[:first_token]
    assert events[-1] == b"data: [DONE]\n\n"
    with openai.OpenAI(base_url=f"{one_lane.url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        chunks = _behind_a_long_reply(one_lane, lambda: list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, stream=True)))
    assert chunks[-1].choices[0].finish_reason is not None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_queued_messages_stream_keeps_claude_codes_event_watchdog_fed(one_lane):
    def raw():
        with httpx.stream("POST", f"{one_lane.url}/v1/messages", timeout=120, json={
                "model": "m", "max_tokens": 8, "stream": True,
                "messages": [{"role": "user", "content": "Say hi."}]}) as r:
            return [json.loads(line[6:]) for line in r.read().decode().splitlines() if line.startswith("data: ")]

    events = _behind_a_long_reply(one_lane, raw)
    types = [e["type"] for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    # Before the reply: message_deltas that change nothing, which Claude Code counts as events (it
    # skips pings, and hangs up after 5 minutes without an event).
    waiting = events[:types.index("content_block_start")]
    beats = [e for e in waiting if e["type"] == "message_delta"]
    assert len(beats) >= 3 and all(e["delta"]["stop_reason"] is None for e in beats), types
    assert types[-2] == "message_delta" and events[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    # The SDK reads past them to the whole message.
    with anthropic.Anthropic(base_url=one_lane.url, api_key="x", max_retries=0, timeout=120) as client:
        def stream():
            with client.messages.stream(model="m", max_tokens=8,
                                        messages=[{"role": "user", "content": "Say hi."}]) as s:
                return s.get_final_message()

        final = _behind_a_long_reply(one_lane, stream)
    assert final.stop_reason in ("end_turn", "max_tokens") and final.content[0].text


def test_a_queued_responses_stream_repeats_in_progress_in_sequence(one_lane):
    with openai.OpenAI(base_url=f"{one_lane.url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        events = _behind_a_long_reply(one_lane, lambda: list(client.responses.create(
            model="m", input="Say hi.", max_output_tokens=8, stream=True)))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.count("response.in_progress") >= 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types[-1] in ("response.completed", "response.incomplete")
    assert json.loads(events[-1].response.model_dump_json())["output"]


def _relayed(chunks: list[bytes | float]) -> list[bytes]:
    """What relayed_with_heartbeat makes of raw chunks, a float being a quiet pause of that many seconds."""
    async def source():
        for chunk in chunks:
            if isinstance(chunk, float):
                await asyncio.sleep(chunk)
            else:
                yield chunk

    async def run() -> list[bytes]:
        return [c async for c in relayed_with_heartbeat(source(), 0.05, b"BEAT")]

    return asyncio.run(run())


def test_a_relayed_stream_gets_beats_only_between_events():
    out = _relayed([0.2, b"data: 1\n\n", 0.2, b"data: 2", 0.2, b"\n", 0.2, b"\n", 0.2, b"data: 3\r\n\r\n", 0.2])
    text = b"".join(out)
    assert text.replace(b"BEAT", b"") == b"data: 1\n\ndata: 2\n\ndata: 3\r\n\r\n"
    assert text.startswith(b"BEATBEAT")
    # Nothing lands inside event 2, however it is split, only after its blank line; CRLF ends an event too.
    assert b"data: 2BEAT" not in text and b"data: 2\nBEAT" not in text
    assert b"data: 1\n\nBEAT" in text and b"data: 2\n\nBEAT" in text and b"\r\n\r\nBEAT" in text


def test_a_relayed_stream_gets_no_beats_when_turned_off():
    async def run() -> list[bytes]:
        async def source():
            yield b"data: 1"
            await asyncio.sleep(0.2)
            yield b"\n\n"
        return [c async for c in relayed_with_heartbeat(source(), 0, b"BEAT")]

    assert asyncio.run(run()) == [b"data: 1", b"\n\n"]
