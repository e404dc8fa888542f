"""Errors typed by who is at fault, in each API's words, over every status the code can emit; and the end a
stream that fails after its 200 gets in each API, read back by the SDK a client would use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest

import swarm_panel
from swarm_panel.app.anthropic_api import errors as anthropic_errors
from swarm_panel.app.openai_api import errors as openai_errors
from swarm_panel.app.responses_api import errors as responses_errors

SOURCES = Path(swarm_panel.__file__).parent
# The helpers that make an APIError without naming its status where they are called.
HELPER_STATUSES = {"bad_request": 400, "too_large": 413, "overloaded": 503, "no_backend_error": 503}
# The server's own 4xx with a type more specific than invalid_request_error, per API.
SPECIFIC = {401: ("authentication_error", "authentication_error"), 403: ("permission_error", "permission_error"),
            404: ("not_found_error", "not_found_error"), 413: ("invalid_request_error", "request_too_large"),
            429: ("rate_limit_error", "rate_limit_error")}
SERVER_TYPES = {"openai": {"server_error"}, "anthropic": {"api_error", "overloaded_error"},
                "responses": {"server_error"}}
# Each API's type (a Responses stream: its failure code) for a status.
TYPE_OF = {"openai": openai_errors.error_type, "anthropic": anthropic_errors.error_type,
           "responses": responses_errors.failure_code}


def emitted_statuses() -> set[int]:
    """Every status a route, the gateway or an error helper names in the sources, and those the gateway relays
    from a backend (any: checked over the whole 4xx and 5xx range below)."""
    found = set(HELPER_STATUSES.values())
    for path in SOURCES.rglob("*.py"):
        text = path.read_text()
        found |= {int(s) for s in re.findall(r"APIError\(\s*(\d{3})", text)}
        found |= {int(s) for s in re.findall(r"status_code=(\d{3})", text)}
        found |= {int(s) for s in re.findall(r'"(?:error|abort)": (\d{3})', text)}  # finish reasons' statuses
    return {s for s in found if s >= 400}


def test_the_sources_emit_client_and_server_errors_alike():
    statuses = emitted_statuses()
    assert {400, 401, 404, 413, 500, 502, 503} <= statuses  # the scan sees what it should


@pytest.mark.parametrize("status", sorted(emitted_statuses() | set(range(400, 600))))
def test_every_status_is_typed_by_who_is_at_fault(status):
    for api, type_of in TYPE_OF.items():
        kind = type_of(status)
        if status >= 500:
            assert kind in SERVER_TYPES[api], (status, api, kind)
        else:
            assert kind not in SERVER_TYPES[api], (status, api, kind)
    if status in SPECIFIC:
        assert (openai_errors.error_type(status), anthropic_errors.error_type(status)) == SPECIFIC[status]
    assert openai_errors.error_body(status, "m")["error"]["type"] == openai_errors.error_type(status)
    assert anthropic_errors.error_body(status, "m")["error"]["type"] == anthropic_errors.error_type(status)


def test_the_named_server_statuses():
    assert [openai_errors.error_type(s) for s in (500, 502, 503, 504)] == ["server_error"] * 4
    assert [anthropic_errors.error_type(s) for s in (500, 502, 503, 504, 529)] == [
        "api_error", "api_error", "overloaded_error", "api_error", "overloaded_error"]
    assert openai_errors.error_type(499) == "invalid_request_error"  # a hang-up is the client's (never sent: nobody is there)


def events(raw: bytes) -> list[tuple[str | None, str]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((fields.get("event"), fields["data"]))
    return out


def test_a_failed_chat_stream_ends_with_an_error_chunk_then_done():
    ended = openai_errors.stream_end(502, "backend b died", code="backend_failed")
    [(_, error), (_, done)] = events(ended)
    assert json.loads(error)["error"] == {"message": "backend b died", "type": "server_error", "param": None,
                                          "code": "backend_failed"}
    assert done == "[DONE]"


def test_a_failed_responses_stream_ends_with_response_failed():
    [(name, data)] = events(responses_errors.stream_end(502, "backend b died", response_id="resp_1",
                                                        sequence_number=7, model="m"))
    event = json.loads(data)
    assert name == event["type"] == "response.failed" and event["sequence_number"] == 7
    assert event["response"]["id"] == "resp_1" and event["response"]["status"] == "failed"
    assert event["response"]["error"] == {"code": "server_error", "message": "backend b died"}


@pytest.mark.parametrize(("status", "kind"), [(502, "api_error"), (503, "overloaded_error")])
def test_a_failed_messages_stream_ends_with_the_error_event_then_message_stop(status, kind):
    [(name, data), (stop, stop_data)] = events(anthropic_errors.stream_end(status, "backend b died"))
    assert name == "error" and json.loads(data) == {"type": "error", "error": {"type": kind,
                                                                                "message": "backend b died"}}
    assert stop == "message_stop" and json.loads(stop_data) == {"type": "message_stop"}


def test_the_openai_sdk_raises_a_typed_error_on_a_failed_stream():
    head = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
            b'"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
    body = head + openai_errors.stream_end(502, "backend b died", code="backend_failed")
    transport = httpx.MockTransport(lambda _: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                                             content=body))
    with openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
                       http_client=httpx.Client(transport=transport)) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        with pytest.raises(openai.APIError) as raised:
            for _ in stream:
                pass
    assert raised.value.message == "backend b died" and raised.value.type == "server_error"
    assert raised.value.code == "backend_failed"
