"""Property-based abuse of every API (chat, completions, Responses, Anthropic Messages, the scheduler):
no body, however odd, gets a 5xx or stops the server, and each error comes in its API's own shape."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm_panel.app.service.panel_key_file import read
from tests.app.server.test_server_common import FAST_CARD, modeled_service, running

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow

# A short context keeps every accepted request to a few dozen modeled tokens.
SHORT_CARD = FAST_CARD.model_copy(update={"max_context": 64})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
chat_fields = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop",
               "stream", "stream_options", "logit_bias", "seed", "user", "tools", "tool_choice",
               "presence_penalty", "frequency_penalty", "ignore_eos", "top_k", "min_p"]
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "bogus"]) | json_values,
                           "content": st.text(max_size=40) | json_values}),
    max_size=3,
)
chat_bodies = st.fixed_dictionaries(
    {"messages": messages},
    optional={name: json_values for name in chat_fields if name != "messages"}
    | {"max_tokens": st.integers(-5, 100), "temperature": st.floats(-1, 3), "stream": st.booleans()},
)
completion_bodies = st.fixed_dictionaries(
    {"prompt": st.text(max_size=40) | json_values},
    optional={"max_tokens": st.integers(-5, 100) | json_values, "stream": st.booleans(), "echo": json_values,
              "stop": json_values, "logprobs": json_values, "suffix": json_values},
)
parts = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "text", "input_image", "refusal"]) | json_values},
    optional={"text": st.text(max_size=20) | json_values, "refusal": json_values}), max_size=2)
response_items = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "item_reference",
                              "bogus"]) | json_values},
    optional={"role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | json_values,
              "content": st.text(max_size=30) | parts | json_values, "call_id": st.text(max_size=8) | json_values,
              "name": st.sampled_from(["get_weather"]) | json_values, "arguments": st.text(max_size=20) | json_values,
              "output": st.text(max_size=20) | parts | json_values, "id": json_values}), max_size=3)
function_tools = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "web_search", "custom"]) | json_values},
    optional={"name": st.sampled_from(["get_weather", ""]) | json_values,
              "parameters": st.just({"type": "object", "properties": {"city": {"type": "string"}}}) | json_values,
              "description": json_values, "strict": json_values}), max_size=2)
responses_bodies = st.fixed_dictionaries(
    {"input": st.text(max_size=30) | response_items | json_values},
    optional={"instructions": st.text(max_size=20) | json_values, "tools": function_tools | json_values,
              "tool_choice": st.sampled_from(["auto", "none", "required"]) | json_values,
              "max_output_tokens": st.integers(-5, 40) | json_values, "temperature": st.floats(-1, 3),
              "text": st.fixed_dictionaries({}, optional={"format": st.fixed_dictionaries(
                  {"type": st.sampled_from(["text", "json_object", "json_schema", "bogus"])},
                  optional={"schema": json_values, "name": json_values})}) | json_values,
              "stream": st.booleans(), "store": st.booleans() | json_values,
              "previous_response_id": st.sampled_from(["stored", "resp_missing"]) | json_values,
              "metadata": json_values, "parallel_tool_calls": json_values, "reasoning": json_values},
)
blocks = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", "thinking", "bogus"]) | json_values},
    optional={"text": st.text(max_size=20) | json_values, "id": st.text(max_size=8) | json_values,
              "name": json_values, "input": json_values, "tool_use_id": st.text(max_size=8) | json_values,
              "content": st.text(max_size=20) | json_values, "cache_control": json_values}), max_size=2)
anthropic_bodies = st.fixed_dictionaries(
    {"max_tokens": st.integers(-5, 40) | json_values,
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "bogus"]) | json_values,
                                                 "content": st.text(max_size=30) | blocks | json_values}),
                          max_size=3) | json_values},
    optional={"system": st.text(max_size=20) | blocks | json_values, "stream": st.booleans(),
              "tools": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["get_weather"]) | json_values},
                                                      optional={"input_schema": json_values}), max_size=2) | json_values,
              "tool_choice": json_values, "stop_sequences": json_values, "temperature": st.floats(-1, 3),
              "metadata": json_values, "thinking": json_values},
)
scheduler_bodies = st.dictionaries(
    st.sampled_from(["policy", "num_lanes", "prefill_chunk", "kv_budget", "admission_wait_s", "bogus"]),
    json_values | st.sampled_from(["naive", "shrinking", "continuous"]) | st.integers(-3, 300),
    max_size=3,
)
fuzz = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def url():
    service = modeled_service(card=SHORT_CARD, num_lanes=8)
    with running(service) as srv:
        yield srv.url
        assert httpx.get(f"{srv.url}/health").status_code == 200


def post(url: str, path: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}{path}", content=content, headers={"content-type": "application/json"}, timeout=30)


def assert_client_answer(resp: httpx.Response) -> None:
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        error = resp.json()["error"]
        assert error["message"] and error["type"]


@fuzz
@given(body=chat_bodies)
def test_chat_bodies(url, body):
    assert_client_answer(post(url, "/v1/chat/completions", body))


@fuzz
@given(body=completion_bodies)
def test_completion_bodies(url, body):
    assert_client_answer(post(url, "/v1/completions", body))


@pytest.fixture(scope="module")
def stored_id(url):
    answer = post(url, "/v1/responses", {"input": "hi", "max_output_tokens": 3})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


@fuzz
@given(body=responses_bodies)
def test_responses_bodies(url, stored_id, body):
    if body.get("previous_response_id") == "stored":
        body["previous_response_id"] = stored_id
    answer = post(url, "/v1/responses", body)
    assert_client_answer(answer)
    if answer.status_code == 200 and not body.get("stream"):
        follow = {"input": "and?", "max_output_tokens": 3, "previous_response_id": answer.json()["id"]}
        assert_client_answer(post(url, "/v1/responses", follow))


@fuzz
@given(response_id=st.text(max_size=30), suffix=st.sampled_from(["", "/input_items", "/input_items?limit=0",
                                                                  "/input_items?order=up&after=x"]))
def test_stored_response_paths(url, response_id, suffix):
    path = f"{url}/v1/responses/{quote(response_id, safe='') or 'x'}{suffix}"
    for method in ("GET",) if suffix else ("GET", "DELETE"):
        answer = httpx.request(method, path, timeout=30)
        assert_client_answer(answer)


@fuzz
@given(body=anthropic_bodies)
def test_anthropic_bodies(url, body):
    answer = post(url, "/v1/messages", body)
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        shaped = answer.json()
        assert shaped["type"] == "error" and shaped["error"]["type"] and shaped["error"]["message"], shaped


@fuzz
@given(body=json_values)
def test_any_json_value(url, body):
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        assert_client_answer(post(url, path, body))
    answer = post(url, "/v1/messages", body)
    assert answer.status_code < 500 and answer.json()["type"] == "error", answer.text


@fuzz
@given(body=st.binary(max_size=64))
def test_raw_bytes(url, body):
    assert_client_answer(post(url, "/v1/chat/completions", body))


@fuzz
@given(body=scheduler_bodies)
def test_scheduler_updates(url, body):
    resp = httpx.put(f"{url}/v1/scheduler", content=json.dumps(body).encode(),
                     headers={"content-type": "application/json", "authorization": f"Bearer {read(url)}"}, timeout=30)
    assert_client_answer(resp)
