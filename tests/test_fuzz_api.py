"""Property-based abuse of the endpoint: no body, however odd, gets a 5xx or stops the server."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_server_common import FAST_CARD, modeled_service, running

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
scheduler_bodies = st.dictionaries(
    st.sampled_from(["policy", "max_batch", "prefill_chunk", "kv_budget", "admission_wait_s", "bogus"]),
    json_values | st.sampled_from(["naive", "shrinking", "continuous"]) | st.integers(-3, 300),
    max_size=3,
)
fuzz = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def url():
    service = modeled_service(card=SHORT_CARD, max_batch=8)
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


@fuzz
@given(body=json_values)
def test_any_json_value(url, body):
    for path in ("/v1/chat/completions", "/v1/completions"):
        assert_client_answer(post(url, path, body))


@fuzz
@given(body=st.binary(max_size=64))
def test_raw_bytes(url, body):
    assert_client_answer(post(url, "/v1/chat/completions", body))


@fuzz
@given(body=scheduler_bodies)
def test_scheduler_updates(url, body):
    resp = httpx.put(f"{url}/v1/scheduler", content=json.dumps(body).encode(),
                     headers={"content-type": "application/json"}, timeout=30)
    assert_client_answer(resp)
