"""Responses API tools as agents send them: namespaces, hosted tools, and a real Codex CLI request."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from swarm_panel.app.responses_api.tools import tool_table
from tests.app.responses_api.test_responses_store import Scripted, prompt_of
from tests.app.server.test_api_adapters import FN_TOOL
from tests.app.server.test_server_common import assert_error, modeled_service, running

# The body Codex CLI 0.171.0 (`codex exec`, a custom provider with wire_api = "responses") posted,
# captured on the wire; only its long texts are cut short.
CODEX_REQUEST = Path(__file__).resolve().parents[2] / "data" / "codex_0.171_responses_request.json"


@pytest.fixture(scope="module")
def server():
    with running(modeled_service(engine_class=Scripted)) as srv:
        yield srv


def test_namespaced_tools_are_offered_by_name_and_their_calls_carry_the_namespace(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    tools = [{"type": "namespace", "name": "weather", "description": "Weather tools", "tools": [FN_TOOL]},
             {"type": "web_search", "external_web_access": False}]
    prompt, first = prompt_of(lambda: client.responses.create(model="m", input="Weather in Paris?", tools=tools))
    assert "get_weather" in prompt and "web_search" not in prompt
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.namespace, call.name) == ("weather", "get_weather")
    assert [t["type"] for t in first.model_dump()["tools"]] == ["namespace", "web_search"]  # echoed as sent

    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'}
    resent, _ = prompt_of(lambda: client.responses.create(
        model="m", tools=tools, store=False,
        input=[{"role": "user", "content": "Weather in Paris?"}, *[i.model_dump() for i in first.output], result]))
    followed, _ = prompt_of(lambda: client.responses.create(model="m", tools=tools, previous_response_id=first.id,
                                                            input=[result]))
    assert followed == resent and "get_weather" in followed


def test_tools_sharing_a_name_in_two_namespaces_are_told_apart():
    table = tool_table([{"type": "namespace", "name": "a", "tools": [FN_TOOL]},
                        {"type": "namespace", "name": "b", "tools": [FN_TOOL]},
                        {**FN_TOOL, "name": "get_time"}, {"type": "file_search"}])
    assert [t["function"]["name"] for t in table.chat_tools] == ["a.get_weather", "b.get_weather", "get_time"]
    assert table.named("b.get_weather") == ("b", "get_weather") and table.named("get_time") == (None, "get_time")
    assert table.model_name("get_weather", "a") == "a.get_weather" and table.model_name("get_time", None) == "get_time"
    alone = tool_table([{"type": "namespace", "name": "a", "tools": [FN_TOOL]}])
    assert alone.model_name("get_weather", "a") == "get_weather" and alone.named("get_weather") == ("a", "get_weather")


def test_a_codex_cli_request_is_served_as_its_agent(server):
    body = json.loads(CODEX_REQUEST.read_text())
    before = len(Scripted.prompts)
    events = []
    with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=60) as stream:
        assert stream.status_code == 200, stream.read()
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    (prompt,) = Scripted.prompts[before:]
    # Its own function tools and the namespaced sub-agent tools reach the model; web search does not.
    assert all(name in prompt for name in ("exec_command", "spawn_agent", "wait_agent", "update_goal"))
    assert "web_search" not in prompt and "You are a coding agent running in the Codex CLI" in prompt
    assert events[-1]["response"]["store"] is False  # Codex sends store: false
    metrics = httpx.get(f"{server.url}/metrics").text
    assert f'agent="{body["prompt_cache_key"]}"' in metrics  # its session is the agent


@pytest.mark.parametrize("tool, param", [
    ({"type": {"function": True}}, "tools.0.type"),
    ({"type": ["function"]}, "tools.0.type"),
    ({"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": {"a": 1}}]}, None),
])
def test_a_tool_type_or_name_that_is_no_string_is_a_400(server, tool, param):
    # Found by the fuzzer in CI: both went into a set lookup and answered 500.
    answer = httpx.post(f"{server.url}/v1/responses", json={"input": "hi", "tools": [tool]}, timeout=30)
    error = assert_error(answer, 400, param=param)
    assert error["type"] == "invalid_request_error" and ("type" in error["param"] or "name" in error["param"])
