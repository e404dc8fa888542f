"""The Responses and Anthropic adapters on a scripted engine, errors in each API's shape, and grammars on llama."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from swarm_panel.app.service.engine_service import SwarmService
from tests.app.server.test_server_common import assert_error, modeled_service, running, settings
from tests.app.server.test_server_tools import H, scripted_engine

FN_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ANTHROPIC_TOOL = {"name": "get_weather", "description": "Weather in a city", "input_schema": FN_TOOL["parameters"]}


@pytest.fixture(scope="module")
def scripted():
    """Replies 'I will look.' and a Hermes call of get_weather(city=Paris)."""
    with running(modeled_service(engine_class=scripted_engine(H))) as srv:
        yield srv


@pytest.fixture(scope="module")
def keyed():
    with running(modeled_service(api_key="sekret")) as srv:
        yield srv


def assert_anthropic_error(response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"], body
    return body["error"]["message"]


def test_responses_turns_the_reply_into_message_and_function_call_items(scripted):
    client = openai.OpenAI(base_url=f"{scripted.url}/v1", api_key="x", max_retries=0)
    result = client.responses.create(model="m", input=[{"role": "user", "content": "Weather in Paris?"}],
                                     tools=[FN_TOOL])
    assert [item.type for item in result.output] == ["message", "function_call"]
    assert result.output_text == "I will look."
    call = result.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    with client.responses.stream(model="m", input="Weather in Paris?", tools=[FN_TOOL]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * kinds.count("response.output_text.delta"),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.output_item.added", "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert final.output_text == "I will look." and final.output[1].name == "get_weather"
    # The call and its output come back as input items: the template sees both.
    followup = client.responses.create(model="m", tools=[FN_TOOL], input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'},
    ])
    assert followup.usage.input_tokens > result.usage.input_tokens


def test_anthropic_messages_turns_the_reply_into_text_and_tool_use_blocks(scripted):
    client = anthropic.Anthropic(base_url=scripted.url, api_key="x", max_retries=0)
    message = client.messages.create(model="m", max_tokens=64, tools=[ANTHROPIC_TOOL],
                                     messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.stop_reason == "tool_use"
    assert message.content[0].text == "I will look." and message.content[1].input == {"city": "Paris"}
    with client.messages.stream(model="m", max_tokens=64, tools=[ANTHROPIC_TOOL],
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert [b.type for b in final.content] == ["text", "tool_use"] and final.stop_reason == "tool_use"


def test_anthropic_errors_are_anthropic_shaped(scripted):
    url = f"{scripted.url}/v1/messages"
    msgs = [{"role": "user", "content": "hi"}]
    assert "max_tokens" in assert_anthropic_error(httpx.post(url, json={"messages": msgs}), 400, "invalid_request_error")
    assert_anthropic_error(httpx.post(url, content=b"{nope"), 400, "invalid_request_error")
    image = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    assert "image" in assert_anthropic_error(httpx.post(url, json={"max_tokens": 5, "messages": image}), 400,
                                             "invalid_request_error")
    assert_anthropic_error(httpx.post(url, json={"max_tokens": 5, "messages": msgs, "tool_choice": {"type": "tool"}}),
                           400, "invalid_request_error")
    assert_anthropic_error(httpx.get(f"{url}/nothing"), 404, "not_found_error")
    with pytest.raises(anthropic.BadRequestError):
        anthropic.Anthropic(base_url=scripted.url, api_key="x", max_retries=0).messages.create(
            model="m", max_tokens=0, messages=msgs)


def test_responses_errors_are_openai_shaped_and_say_what_is_not_offered(scripted):
    url = f"{scripted.url}/v1/responses"
    error = assert_error(httpx.post(url, json={"input": "hi", "previous_response_id": "resp_1"}), 400,
                         param="previous_response_id", code="previous_response_not_found")
    assert "resend the conversation" in error["message"]
    error = assert_error(httpx.post(url, json={"input": "hi", "conversation": "conv_1"}), 400, param="conversation")
    assert "Conversations API" in error["message"]
    assert_error(httpx.post(url, json={"input": [{"type": "item_reference", "id": "x"}]}), 400, param="input.0")
    assert_error(httpx.post(url, json={"input": "hi", "tools": [{"type": "custom", "name": "patch"}]}), 400,
                 param="tools.0.type")
    namespace = {"type": "namespace", "name": "ns", "tools": [{"type": "local_shell"}]}
    assert_error(httpx.post(url, json={"input": "hi", "tools": [namespace]}), 400, param="tools.0.tools.0.type")
    assert_error(httpx.post(url, json={"input": "hi", "tools": [{"type": "namespace", "tools": []}]}), 400,
                 param="tools.0")
    assert_error(httpx.post(url, json={"input": [{"role": "user", "content": [{"type": "input_image"}]}]}), 400,
                 param="input.0.content.0")
    assert_error(httpx.post(url, json={}), 400, param="input")
    assert_error(httpx.get(f"{url}/resp_1"), 404, code="response_not_found")


def test_x_api_key_is_accepted_wherever_a_bearer_token_is(keyed):
    msgs = [{"role": "user", "content": "hi"}]
    ok = httpx.post(f"{keyed.url}/v1/messages", headers={"x-api-key": "sekret"}, json={"max_tokens": 3, "messages": msgs})
    assert ok.status_code == 200, ok.text
    ok = httpx.post(f"{keyed.url}/v1/chat/completions", headers={"x-api-key": "sekret"},
                    json={"messages": msgs, "max_tokens": 3})
    assert ok.status_code == 200, ok.text
    ok = httpx.post(f"{keyed.url}/v1/messages", headers={"authorization": "Bearer sekret"},
                    json={"max_tokens": 3, "messages": msgs})
    assert ok.status_code == 200, ok.text
    assert_anthropic_error(httpx.post(f"{keyed.url}/v1/messages", headers={"x-api-key": "wrong"},
                                      json={"max_tokens": 3, "messages": msgs}), 401, "authentication_error")
    assert_error(httpx.post(f"{keyed.url}/v1/responses", json={"input": "hi", "max_output_tokens": 3}), 401,
                 code="invalid_api_key")


def test_the_modeled_engine_refuses_constraints_and_logprobs_but_serves_n(scripted):
    url = f"{scripted.url}/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert_error(httpx.post(url, json={"messages": msgs, "response_format": fmt}), 400, param="response_format",
                 code="unsupported_by_engine")
    assert_error(httpx.post(url, json={"messages": msgs, "logprobs": True}), 400, param="logprobs",
                 code="unsupported_by_engine")
    assert_error(httpx.post(url, json={"messages": msgs, "top_logprobs": 2}), 400)
    two = httpx.post(url, json={"messages": msgs, "n": 2, "max_tokens": 3}).json()
    assert [c["index"] for c in two["choices"]] == [0, 1]


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    service = SwarmService(settings(engine="llama", model=tiny_model_path, n_ctx=1024, n_batch=128, num_lanes=2,
                                    threads=1))
    with running(service) as srv:
        yield srv


def test_a_grammar_of_the_clients_own_constrains_llama_output(tiny):
    url = f"{tiny.url}/v1"
    grammar = 'root ::= ("yes" | "no") " " ("yes" | "no")'
    for path, body in (("chat/completions", {"messages": [{"role": "user", "content": "ok?"}]}),
                       ("completions", {"prompt": "ok?"})):
        result = httpx.post(f"{url}/{path}", json={**body, "grammar": grammar, "max_tokens": 10}, timeout=60).json()
        choice = result["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        assert text.split() in ([a, b] for a in ("yes", "no") for b in ("yes", "no")), text
        assert choice["finish_reason"] == "stop"
    assert_error(httpx.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                              "grammar": "root ::= ("}), 400, param="grammar")
    both = {"messages": [{"role": "user", "content": "x"}], "grammar": grammar, "response_format": {"type": "json_object"}}
    assert_error(httpx.post(f"{url}/chat/completions", json=both), 400, param="response_format")
