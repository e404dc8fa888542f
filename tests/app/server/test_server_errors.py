"""Every way a client can get a request wrong: an OpenAI-shaped 4xx (or 503), never a 500."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B
from tests.app.server.test_server_common import assert_error, modeled_service, panel, running, wait_until

OK_MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def server():
    service = modeled_service(max_body_bytes=4096, max_prompt_chars=1000)
    with running(service) as srv:
        srv.service = service
        yield srv


def chat(server, body, **kw) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30, **kw)


def test_malformed_json_is_a_400(server):
    resp = httpx.post(f"{server.url}/v1/chat/completions", content=b'{"messages": [', timeout=10,
                      headers={"content-type": "application/json"})
    assert_error(resp, 400, code="invalid_json")
    resp = httpx.post(f"{server.url}/v1/chat/completions", content=b"\xff\xfe", timeout=10)
    assert_error(resp, 400, code="invalid_json")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
@pytest.mark.parametrize("constant", [b"Infinity", b"-Infinity", b"NaN"])
def test_nan_and_infinity_are_not_json(server, path, constant):
    """Python's parser takes them; echoed back in metadata they made the reply unencodable (a 500)."""
    body = b'{"input": "", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "metadata": {"a": '
    resp = httpx.post(f"{server.url}{path}", content=body + constant + b"}}", timeout=10,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and constant.decode().lstrip("-") in resp.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages.0.role"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content"),
        ({"messages": OK_MESSAGES, "temperature": "hot"}, "temperature"),
        ({"messages": OK_MESSAGES, "temperature": 2.5}, "temperature"),
        ({"messages": OK_MESSAGES, "temperature": -0.1}, "temperature"),
        ({"messages": OK_MESSAGES, "top_p": 0}, "top_p"),
        ({"messages": OK_MESSAGES, "top_p": 1.5}, "top_p"),
        ({"messages": OK_MESSAGES, "max_tokens": 0}, "max_tokens"),
        ({"messages": OK_MESSAGES, "max_tokens": "many"}, "max_tokens"),
        ({"messages": OK_MESSAGES, "max_completion_tokens": -3}, "max_completion_tokens"),
        ({"messages": OK_MESSAGES, "n": 17}, "n"),
        ({"messages": OK_MESSAGES, "presence_penalty": 2.5}, "presence_penalty"),
        ({"messages": OK_MESSAGES, "frequency_penalty": -3}, "frequency_penalty"),
        ({"messages": OK_MESSAGES, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": OK_MESSAGES, "stop": 5}, "stop"),
        ({"messages": OK_MESSAGES, "logit_bias": {"12": 150}}, "logit_bias"),
        ({"messages": OK_MESSAGES, "logit_bias": {"token": 1}}, "logit_bias"),
        ({"messages": OK_MESSAGES, "seed": "x"}, "seed"),
        ({"messages": OK_MESSAGES, "stream": "yes please"}, "stream"),
        ({"messages": OK_MESSAGES, "stream_options": {"include_usage": "maybe"}}, "stream_options.include_usage"),
        ({"messages": OK_MESSAGES, "user": "u" * 1000}, "user"),
        ({"messages": OK_MESSAGES, "logprobs": True}, "logprobs"),
        ({"messages": OK_MESSAGES, "tools": [{"type": "function"}]}, "tools.0.function"),
        ({"messages": OK_MESSAGES, "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": OK_MESSAGES, "tool_choice": "required"}, None),
        ({"messages": OK_MESSAGES, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None),
    ],
)
def test_bad_chat_fields_are_400s_naming_the_field(server, body, param):
    error = assert_error(chat(server, body), 400)
    if param is not None:
        assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"prompt": []},
        {"prompt": ["one", "two"]},
        {"prompt": [1, -2]},
        {"prompt": "x", "suffix": "y"},
        {"prompt": "x", "max_tokens": 0},
    ],
)
def test_bad_completion_fields_are_400s(server, body):
    assert_error(httpx.post(f"{server.url}/v1/completions", json=body, timeout=10), 400)


def test_a_body_that_is_not_an_object_is_a_400(server):
    assert_error(chat(server, ["messages"]), 400)
    assert_error(chat(server, None), 400)


def test_prompt_longer_than_the_context_is_a_400(server):
    resp = httpx.post(f"{server.url}/v1/completions", timeout=10,
                      json={"prompt": list(range(3, 3 + RX_9070_XT_QWEN35_9B.max_context + 5)), "max_tokens": 1})
    assert resp.status_code in (400, 413)  # this prompt is also larger than the small body limit
    assert_error(resp, resp.status_code)


def test_prompt_over_max_prompt_chars_is_refused_before_tokenizing(server):
    resp = chat(server, {"messages": [{"role": "user", "content": "x" * 1500}]})
    assert_error(resp, 400, code="context_length_exceeded", contains="characters")


def test_context_overflow_on_a_tiny_context():
    card = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 0.2, "per_row_ms": 0.0, "max_context": 32})
    with running(modeled_service(card)) as srv:
        resp = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 400}]})
        assert_error(resp, 400, code="context_length_exceeded", param="messages")


@pytest.mark.parametrize("stream", [False, True])
def test_a_max_tokens_past_the_context_is_cut_on_every_endpoint_with_the_reason(stream):
    card = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 0.2, "per_row_ms": 0.0, "max_context": 48})
    service = modeled_service(card)
    asks = {
        "/v1/completions": {"prompt": "hi", "max_tokens": 400},
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 400},
        "/v1/responses": {"input": "hi", "max_output_tokens": 400},
        "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 400},
    }
    with running(service) as srv:
        for done, (path, body) in enumerate(asks.items()):
            resp = httpx.post(f"{srv.url}{path}", json={**body, "stream": stream}, timeout=30)
            assert resp.status_code == 200, (path, resp.text)
            note = resp.headers["x-swarm-panel-note"]
            assert note.startswith("max_tokens 400 cut to ") and "48 tokens a request can hold" in note, note
            # A stream's line is written as its response closes, just after the client has read it.
            wait_until(lambda: len(service.requests.records()) > done, what="the request's log line")  # noqa: B023
            record = service.requests.records()[-1]
            assert record.endpoint == path and record.note == note and record.status == 200
            cut = int(note.removeprefix("max_tokens 400 cut to ").split(":")[0])
            assert record.prompt_tokens + cut == 48 and record.output_tokens <= cut


def test_oversized_bodies_are_413_by_header_and_by_stream(server):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 8000}]}).encode()
    assert_error(httpx.post(f"{server.url}/v1/chat/completions", content=big, timeout=10), 413,
                 code="request_too_large")

    def chunked():
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    resp = httpx.post(f"{server.url}/v1/chat/completions", content=chunked(), timeout=10)
    assert "content-length" not in resp.request.headers
    assert_error(resp, 413, code="request_too_large")


def test_the_official_client_sees_the_errors(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=OK_MESSAGES, n=100)
    assert info.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[{"role": "narrator", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="hi")


def test_unknown_route_and_method_are_openai_shaped(server):
    assert_error(httpx.get(f"{server.url}/v1/nothing"), 404)
    assert_error(httpx.get(f"{server.url}/v1/chat/completions"), 405)


def test_scheduler_put_refuses_bad_values_and_unknown_keys(server):
    url, key = f"{server.url}/v1/scheduler", panel(server)
    assert_error(httpx.put(url, json={"policy": "fifo"}, headers=key), 400, param="policy")
    assert_error(httpx.put(url, json={"num_lanes": 0}, headers=key), 400, param="num_lanes")
    assert_error(httpx.put(url, json={"num_lanes": 100_000}, headers=key), 400, param="num_lanes")
    assert_error(httpx.put(url, json={"prefill_chunk": "big"}, headers=key), 400, param="prefill_chunk")
    assert_error(httpx.put(url, json={"turbo": True}, headers=key), 400, param="turbo")
    assert_error(httpx.put(url, json={"policy": None}, headers=key), 400)
    assert_error(httpx.put(url, json=[1, 2], headers=key), 400)
    assert_error(httpx.put(url, content=b"{", headers=key), 400, code="invalid_json")
    assert httpx.get(url).json()["policy"] == "continuous"


def test_wrong_or_missing_api_key_is_a_401():
    with running(modeled_service(api_key="sekret")) as srv:
        url = f"{srv.url}/v1/chat/completions"
        body = {"messages": OK_MESSAGES, "max_tokens": 2}
        assert_error(httpx.post(url, json=body), 401, code="invalid_api_key")
        assert_error(httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(httpx.post(url, json=body, headers={"Authorization": "Basic sekret"}), 401)
        assert_error(httpx.get(f"{srv.url}/v1/models"), 401)
        assert_error(httpx.get(f"{srv.url}/metrics"), 401)
        assert httpx.get(f"{srv.url}/health").status_code == 200
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer sekret"}).status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{srv.url}/v1", api_key="nope", max_retries=0).models.list()
        good = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sekret", max_retries=0)
        assert good.chat.completions.create(model="m", messages=OK_MESSAGES, max_tokens=3).usage.completion_tokens == 3


def test_a_full_queue_is_a_503_with_retry_after():
    service = modeled_service(num_lanes=1, max_waiting=1)
    with running(service) as srv:
        url = f"{srv.url}/v1/chat/completions"
        long = {"messages": OK_MESSAGES, "max_tokens": 20_000, "stream": True}
        with httpx.Client(timeout=30) as a, httpx.Client(timeout=30) as b:
            with a.stream("POST", url, json=long) as first:
                first_lines = first.iter_lines()  # dropping the iterator would close the connection
                next(first_lines)
                # Its first line can leave before the engine thread takes it off the queue.
                wait_until(lambda: service.engine_thread.num_waiting == 0, what="the first request admitted")
                with b.stream("POST", url, json=long) as second:
                    assert second.status_code == 200
                    wait_until(lambda: service.engine_thread.num_waiting == 1, what="a waiting request")
                    resp = httpx.post(url, json={"messages": OK_MESSAGES, "max_tokens": 2})
                    error = assert_error(resp, 503, code="overloaded")
                    assert error["type"] == "server_error"
                    assert int(resp.headers["retry-after"]) >= 1
                    with pytest.raises(openai.InternalServerError):
                        openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0).chat.completions.create(
                            model="m", messages=OK_MESSAGES, max_tokens=2)
        wait_until(lambda: service.engine_thread.num_running == 0 and service.engine_thread.num_waiting == 0,
                   what="both hung-up requests to be aborted")
        assert httpx.post(url, json={"messages": OK_MESSAGES, "max_tokens": 2}).status_code == 200


def test_no_engine_is_a_503_and_health_says_so():
    service = modeled_service()
    with running(service) as srv:
        service.stop()
        resp = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": OK_MESSAGES})
        assert_error(resp, 503, code="model_not_loaded")
        assert "retry-after" in resp.headers
        assert httpx.get(f"{srv.url}/health").status_code == 503
        assert httpx.get(f"{srv.url}/metrics").status_code == 200


def test_an_engine_failure_fails_its_requests_clearly_and_the_server_keeps_serving():
    from swarm_panel.runtime.modeled.engine import ModeledEngine

    class Flaky(ModeledEngine):
        failures = 2

        def step(self, plan):
            if plan.rows and Flaky.failures and any(r.request.agent == "doomed" for r in plan.rows):
                Flaky.failures -= 1
                raise RuntimeError("device lost")
            return super().step(plan)

    with running(modeled_service(engine_class=Flaky)) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="m", messages=OK_MESSAGES, max_tokens=5, user="doomed")
        assert "device lost" in info.value.message
        with pytest.raises(openai.APIError, match="device lost"):
            for _ in client.chat.completions.create(model="m", messages=OK_MESSAGES, max_tokens=5, stream=True,
                                                    user="doomed"):
                pass
        assert client.chat.completions.create(model="m", messages=OK_MESSAGES, max_tokens=4).usage.completion_tokens == 4
