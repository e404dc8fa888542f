"""The response schema is the wire: every whole reply and every streamed event of each API parses as its
model and dumps back to the same bytes, so app/*_models.py describe all that clients receive."""

from __future__ import annotations

import json
from typing import Annotated, Any

import httpx
import pytest
from pydantic import Field, TypeAdapter

from swarm_panel.app.anthropic_api import models as am
from swarm_panel.app.openai_api.models import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk
from swarm_panel.app.responses_api import models as rm
from tests.app.server.test_api_adapters import ANTHROPIC_TOOL, FN_TOOL
from tests.app.server.test_server_common import modeled_service, running
from tests.app.server.test_server_tools import H, scripted_engine

MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
CHAT_TOOL = {"type": "function", "function": {"name": FN_TOOL["name"], "parameters": FN_TOOL["parameters"]}}

ResponsesEvent = Annotated[
    rm.ResponseEvent | rm.OutputItemEvent | rm.ContentPartEvent | rm.ReasoningTextDelta | rm.OutputTextDelta
    | rm.ReasoningTextDone | rm.OutputTextDone | rm.FunctionCallArgumentsDelta | rm.FunctionCallArgumentsDone,
    Field(discriminator="type")]
AnthropicEvent = Annotated[
    am.MessageStart | am.Ping | am.ContentBlockStart | am.ContentBlockDelta | am.ContentBlockStop | am.MessageDelta
    | am.MessageStop | am.StreamError, Field(discriminator="type")]


@pytest.fixture(scope="module")
def url():
    """Replies 'I will look.' and a Hermes call of get_weather(city=Paris)."""
    with running(modeled_service(engine_class=scripted_engine(H))) as srv:
        yield srv.url


def sse_events(resp: httpx.Response) -> list[tuple[str | None, str]]:
    """(event name, data text) of each server-sent event."""
    assert resp.status_code == 200, resp.text
    events = []
    for block in resp.text.split("\n\n"):
        if not block:
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields.get("event"), fields["data"]))
    return events


def wire(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def assert_same_on_the_wire(model: Any, data: str, **dump: Any) -> Any:
    parsed = TypeAdapter(model).validate_json(data)
    assert wire(parsed.model_dump(**dump)) == data
    return parsed


@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_chunks_and_the_whole_completion_are_their_models(url, include_usage):
    body = {"messages": MESSAGES, "tools": [CHAT_TOOL]}
    whole = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert_same_on_the_wire(ChatCompletion, whole.text)
    stream = {**body, "stream": True, "stream_options": {"include_usage": include_usage}}
    *chunks, done = sse_events(httpx.post(f"{url}/v1/chat/completions", json=stream, timeout=30))
    assert done == (None, "[DONE]")
    parsed = [assert_same_on_the_wire(ChatCompletionChunk, data, exclude=None if include_usage else {"usage"})
              for _, data in chunks]
    # Usage rides on every chunk (null until the last, which has no choices) only when asked for.
    assert all(("usage" in json.loads(data)) is include_usage for _, data in chunks)
    if include_usage:
        assert [c.usage is None for c in parsed] == [True] * (len(parsed) - 1) + [False]
        assert parsed[-1].choices == [] and parsed[-1].usage.total_tokens == json.loads(whole.text)["usage"]["total_tokens"]
    calls = [call for c in parsed for choice in c.choices for call in choice.delta.tool_calls or []]
    assert [call.function.name for call in calls] == ["get_weather"]


def test_completion_chunks_and_the_whole_completion_are_their_models(url):
    body = {"prompt": "hello", "max_tokens": 3, "echo": True}
    assert_same_on_the_wire(Completion, httpx.post(f"{url}/v1/completions", json=body, timeout=30).text)
    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    *chunks, done = sse_events(httpx.post(f"{url}/v1/completions", json=stream, timeout=30))
    assert done == (None, "[DONE]")
    parsed = [assert_same_on_the_wire(CompletionChunk, data) for _, data in chunks]
    assert parsed[0].choices[0].text == "hello" and parsed[-1].usage.completion_tokens == 3


@pytest.mark.parametrize("max_output_tokens", [None, 2])
def test_responses_events_and_the_whole_response_are_their_models(url, max_output_tokens):
    body = {"input": "Weather in Paris?", "tools": [FN_TOOL], "max_output_tokens": max_output_tokens}
    whole = assert_same_on_the_wire(rm.Response, httpx.post(f"{url}/v1/responses", json=body, timeout=30).text)
    events = sse_events(httpx.post(f"{url}/v1/responses", json={**body, "stream": True}, timeout=30))
    parsed = [assert_same_on_the_wire(ResponsesEvent, data) for _, data in events]
    assert [name for name, _ in events] == [event.type for event in parsed]
    assert [event.sequence_number for event in parsed] == list(range(len(parsed)))
    last = parsed[-1].response
    assert last.status == whole.status == ("completed" if max_output_tokens is None else "incomplete")
    assert [item.type for item in last.output] == [item.type for item in whole.output]


@pytest.mark.parametrize("max_tokens", [64, 2])
def test_anthropic_events_and_the_whole_message_are_their_models(url, max_tokens):
    body = {"max_tokens": max_tokens, "messages": MESSAGES, "tools": [ANTHROPIC_TOOL]}
    whole = assert_same_on_the_wire(am.Message, httpx.post(f"{url}/v1/messages", json=body, timeout=30).text)
    events = sse_events(httpx.post(f"{url}/v1/messages", json={**body, "stream": True}, timeout=30))
    parsed = [assert_same_on_the_wire(AnthropicEvent, data) for _, data in events]
    assert [name for name, _ in events] == [event.type for event in parsed]
    starts = [event.content_block.type for event in parsed if isinstance(event, am.ContentBlockStart)]
    assert starts == [block.type for block in whole.content]
    assert parsed[-2].delta.stop_reason == whole.stop_reason == ("tool_use" if max_tokens == 64 else "max_tokens")
