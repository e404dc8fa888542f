"""A streamed request the gateway has no answer for yet gets its stream at once, with keep-alives.

A real `swarm-panel serve` backend with one lane (the bundled model) and `swarm-panel gateway` in
front. While one long reply holds the lane, the next streamed request waits in the gateway's queue,
where nothing of the backend's own keep-alives reaches it. Or it waits
while a backend that sends none (as llama-server and vLLM send none) computes a long prompt, and the
gateway adds them to the relayed stream, between its events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from swarm_panel.app.endpoint.wire import KEEPALIVE
from tests.app.server.test_server_common import wait_until
from tests.gateway_fleet import backend, gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LONG = {"prompt": "Count:", "max_tokens": 3000, "ignore_eos": True, "temperature": 0, "stream": True}


@pytest.fixture(scope="module")
def one_slot(real_model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one_slot")
    with backend(real_model_path, tmp, "backend", num_lanes=1) as (url, _):
        with gateway([f"{url} slots=1"], tmp, "--stream-heartbeat-s", "0.1") as (gateway_url, _):
            yield gateway_url


def _inflight(gateway_url: str) -> float:
    lines = httpx.get(f"{gateway_url}/metrics", timeout=5).text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("swarm_panel:gateway_backend_inflight"))


@contextmanager
def slot_held(gateway_url: str) -> Iterator[threading.Event]:
    """A long streamed reply holds the one slot until the event is set; its client then hangs up."""
    release = threading.Event()

    def hold() -> None:
        with httpx.stream("POST", f"{gateway_url}/v1/completions", json=LONG, timeout=120) as r:
            for _ in r.iter_raw():
                if release.is_set():
                    return

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        wait_until(lambda: _inflight(gateway_url) == 1, what="the slot taken")
        yield release
    finally:
        release.set()
        holder.join()


def _events(gateway_url: str, path: str, body: dict) -> list[bytes]:
    """The raw events of a streamed request sent while another holds the one slot, freed after two beats."""
    with slot_held(gateway_url) as release:
        with httpx.stream("POST", f"{gateway_url}{path}", json=body | {"stream": True}, timeout=120) as r:
            assert r.status_code == 200
            seen = b""
            for chunk in r.iter_raw():
                seen += chunk
                if seen.count(b"\n\n") >= 2:
                    release.set()
    return [e + b"\n\n" for e in seen.split(b"\n\n") if e]


def test_a_queued_chat_stream_gets_comments_then_the_backends_stream(one_slot):
    events = _events(one_slot, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    first_data = next(i for i, e in enumerate(events) if e.startswith(b"data: "))
    assert first_data >= 2 and set(events[:first_data]) == {b": keep-alive\n\n"}
    assert events[-1] == b"data: [DONE]\n\n"


def test_a_queued_messages_stream_gets_pings_before_message_start(one_slot):
    events = _events(one_slot, "/v1/messages",
                     {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    starts = [i for i, e in enumerate(events) if e.startswith(b"event: message_start")]
    assert starts and starts[0] >= 2
    assert all(e.startswith(b"event: ping") for e in events[:starts[0]])
    assert events[-1].startswith(b"event: message_stop")


def test_a_queued_request_the_backend_refuses_ends_with_an_error_event(one_slot):
    events = _events(one_slot, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 99})
    assert events[0] == b": keep-alive\n\n"
    # The client's mistake, as the backend said: typed as such, then the stream's proper end.
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["type"] == "invalid_request_error" and "answered 400" in error["message"]
    assert events[-1] == b"data: [DONE]\n\n"


def _forwarded(gateway_url: str) -> float:
    lines = httpx.get(f"{gateway_url}/metrics", timeout=5).text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("swarm_panel:gateway_backend_requests_total"))


def test_a_client_leaving_a_queued_stream_leaves_the_queue_unsent(one_slot):
    before = _forwarded(one_slot)
    with slot_held(one_slot):
        with httpx.stream("POST", f"{one_slot}/v1/chat/completions", timeout=120, json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}) as r:
            chunks = r.iter_raw()  # held: dropping the iterator would close the stream at once
            assert next(chunks) == b": keep-alive\n\n"
            assert httpx.get(f"{one_slot}/health", timeout=5).json()["waiting"] == 1
        wait_until(lambda: httpx.get(f"{one_slot}/health", timeout=5).json()["waiting"] == 0, what="queue left")
    wait_until(lambda: _inflight(one_slot) == 0, what="the slot freed")
    assert _forwarded(one_slot) == before + 1


@pytest.fixture(scope="module")
def quiet_backend(real_model_path, tmp_path_factory):
    """A backend that sends no keep-alives of its own, as llama-server and vLLM send none."""
    tmp = tmp_path_factory.mktemp("quiet_backend")
    with backend(real_model_path, tmp, "backend", 1, "--stream-heartbeat-s", "0") as (url, _):
        with gateway([url], tmp, "--stream-heartbeat-s", "0.1") as (gateway_url, _):
            yield gateway_url


def _long_prompt_stream(gateway_url: str, path: str, body: dict, word: str) -> list[bytes]:
    """The raw events of a streamed request whose prompt (about 1,000 tokens, seconds on one thread)
    keeps the backend quiet before its first token."""
    prompt = " ".join(f"{word}{i % 50}" for i in range(400))
    body = body | {"stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]}
    with httpx.stream("POST", f"{gateway_url}{path}", json=body, timeout=120) as r:
        assert r.status_code == 200
        seen = r.read()
    return [e + b"\n\n" for e in seen.split(b"\n\n") if e]


def test_a_chat_stream_quiet_while_a_backend_computes_its_prompt_gets_comments(quiet_backend):
    events = _long_prompt_stream(quiet_backend, "/v1/chat/completions", {}, "apple")
    data = [i for i, e in enumerate(events) if e.startswith(b"data: ")]
    # The backend's first chunk (the role) goes out at once; its first token comes after the prompt.
    assert events[data[0] + 1:data[1]].count(KEEPALIVE) >= 2
    assert all(e == KEEPALIVE or e.startswith(b"data: ") and e.count(b"data: ") == 1 for e in events)
    assert events[-1] == b"data: [DONE]\n\n"


def test_a_messages_stream_quiet_after_message_start_gets_pings_between_its_events(quiet_backend):
    events = _long_prompt_stream(quiet_backend, "/v1/messages", {"model": "m"}, "pear")
    kinds = [e.split(b"\n", 1)[0].removeprefix(b"event: ") for e in events]
    first_delta = kinds.index(b"content_block_delta")
    # A loaded machine may hold the backend's first bytes past the heartbeat too: pings then come before
    # message_start as well (docs/gateway.md, "Keep-alives"). Its own events keep their order.
    assert [k for k in kinds if k != b"ping"][0] == b"message_start"
    assert kinds.index(b"message_start") < len(kinds) - 1 - kinds[::-1].index(b"ping") < first_delta
    assert kinds[:first_delta].count(b"ping") >= 2 and kinds[-1] == b"message_stop"
    # Every event arrives whole: a ping never lands inside one of the backend's.
    assert all(e.startswith(b"event: ") and e.count(b"\ndata: ") == 1 for e in events)
