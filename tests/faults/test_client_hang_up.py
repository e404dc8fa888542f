"""A client that hangs up at each stage of its request: queued, prefilling, decoding a reply sent whole, and
streaming. Each time the request is aborted (the request log's line says 499, finish abort), its lane and KV
are freed, and the server goes on answering."""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest

from tests.app.server.test_server_common import idle, modeled_service, running, wait_until

LONG_PROMPT = "word " * 6000


@pytest.fixture(scope="module")
def server():
    # One lane, so a second request queues; a small prefill chunk, so a long prompt prefills over many steps.
    service = modeled_service(num_lanes=1, prefill_chunk=16)
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.fixture(autouse=True)
def _request_lines(caplog):
    caplog.set_level(logging.INFO, logger="swarm_panel.requests")


def send(url: str, body: dict) -> socket.socket:
    """The request on a raw connection, left open: closing it is the hang-up."""
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)))
    payload = json.dumps(body).encode()
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    return conn


def lane_state(service, agent: str) -> str | None:
    return next((lane.state for lane in service.engine_thread.lanes() if lane.agent == agent), None)


def hung_up(server, agent: str, caplog) -> None:
    """What the user and the operator see after the hang-up."""
    service = server.service
    wait_until(lambda: idle(service), timeout=10, what="the lane and KV to be freed")
    wait_until(lambda: service.requests.records(agent=agent), timeout=5, what="the request's log line")
    [record] = service.requests.records(agent=agent)
    assert record.status == 499 and record.finish == "abort", record
    [line] = [r.getMessage() for r in caplog.records if r.name == "swarm_panel.requests"
              and r.getMessage().startswith(f"{agent} ")]
    assert " 499 " in line and "finish=abort" in line
    assert service.inflight.snapshot() == {}
    answer = httpx.post(f"{server.url}/v1/chat/completions", timeout=30,
                        json={"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 3})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3


def test_a_hang_up_while_queued(server, caplog):
    service = server.service
    wait_until(lambda: idle(service), what="an idle engine")
    holder = send(server.url, {"messages": [{"role": "user", "content": "hold"}], "max_tokens": 20_000,
                               "stream": True, "user": "holder"})
    wait_until(lambda: lane_state(service, "holder") == "decode", what="the lane to be taken")
    queued = send(server.url, {"messages": [{"role": "user", "content": "wait"}], "max_tokens": 8, "stream": True,
                               "user": "queued"})
    wait_until(lambda: service.engine_thread.num_waiting == 1, what="the second request to queue")
    queued.close()
    wait_until(lambda: service.engine_thread.num_waiting == 0, timeout=5, what="the queued request to go")
    assert lane_state(service, "holder") == "decode"  # the other client is untouched
    holder.close()
    hung_up(server, "queued", caplog)


def test_a_hang_up_while_prefilling(server, caplog):
    wait_until(lambda: idle(server.service), what="an idle engine")
    conn = send(server.url, {"messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 8,
                             "user": "prefiller"})
    wait_until(lambda: lane_state(server.service, "prefiller") == "prefill", what="the prefill to start")
    conn.close()
    hung_up(server, "prefiller", caplog)
    [record] = server.service.requests.records(agent="prefiller")
    assert record.output_tokens == 0


def test_a_hang_up_while_decoding_a_reply_sent_whole(server, caplog):
    wait_until(lambda: idle(server.service), what="an idle engine")
    conn = send(server.url, {"messages": [{"role": "user", "content": "go"}], "max_tokens": 20_000,
                             "user": "decoder"})
    wait_until(lambda: lane_state(server.service, "decoder") == "decode", what="decoding to start")
    conn.close()
    hung_up(server, "decoder", caplog)


def test_a_hang_up_while_streaming(server, caplog):
    wait_until(lambda: idle(server.service), what="an idle engine")
    conn = send(server.url, {"messages": [{"role": "user", "content": "go"}], "max_tokens": 20_000, "stream": True,
                             "user": "streamer"})
    received = b""
    while received.count(b"data: ") < 3:
        received += conn.recv(4096)
    assert received.startswith(b"HTTP/1.1 200")
    conn.close()
    hung_up(server, "streamer", caplog)
    [record] = server.service.requests.records(agent="streamer")
    assert record.output_tokens > 0
