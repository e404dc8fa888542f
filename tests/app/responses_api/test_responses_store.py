"""Stored responses: previous_response_id, retrieve, input items and delete, on a scripted engine."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.app.responses_api.models import Response
from swarm_panel.app.responses_api.store import ResponseStore, StoredResponse
from tests.app.server.test_api_adapters import FN_TOOL
from tests.app.server.test_server_common import assert_error, modeled_service, running
from tests.app.server.test_server_tools import H, scripted_engine

Scripted = scripted_engine(H)


@pytest.fixture(scope="module")
def server():
    """Replies 'I will look.' and a Hermes call of get_weather(city=Paris); its prompts are recorded."""
    with running(modeled_service(engine_class=Scripted)) as srv:
        yield srv


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as c:
        yield c


def prompt_of(create) -> tuple[str, object]:
    """The prompt the engine rendered for one request, and its result."""
    before = len(Scripted.prompts)
    result = create()
    (prompt,) = Scripted.prompts[before:]
    return prompt, result


def test_a_follow_up_by_previous_response_id_renders_the_prompt_a_resend_would(client):
    first = client.responses.create(model="m", input="Weather in Paris?", tools=[FN_TOOL], instructions="Be brief.")
    assert first.store and [item.type for item in first.output] == ["message", "function_call"]
    call = first.output[1]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 18}'}
    followed, follow_up = prompt_of(lambda: client.responses.create(
        model="m", previous_response_id=first.id, input=[result], tools=[FN_TOOL], instructions="Be brief."))
    resent, resend = prompt_of(lambda: client.responses.create(
        model="m", store=False, tools=[FN_TOOL], instructions="Be brief.",
        input=[{"role": "user", "content": "Weather in Paris?"}, *[item.model_dump() for item in first.output], result]))
    assert followed == resent and "I will look." in followed and '"temp_c": 18' in followed
    assert follow_up.previous_response_id == first.id and follow_up.usage.input_tokens == resend.usage.input_tokens
    assert not resend.store

    # A chain holds its whole conversation: the first response going does not break the second's.
    client.responses.delete(first.id)
    third, _ = prompt_of(lambda: client.responses.create(model="m", previous_response_id=follow_up.id, input="Thanks."))
    assert "Weather in Paris?" in third and '"temp_c": 18' in third and third.rstrip().count("I will look.") == 2


def test_instructions_are_not_inherited_by_a_follow_up(client):
    first = client.responses.create(model="m", input="Hello", instructions="Answer in French.")
    plain, _ = prompt_of(lambda: client.responses.create(model="m", previous_response_id=first.id, input="Again"))
    other, _ = prompt_of(lambda: client.responses.create(model="m", previous_response_id=first.id, input="Again",
                                                         instructions="Answer in German."))
    assert "French" not in plain and "Hello" in plain
    assert "German" in other and "French" not in other


def test_a_streamed_response_is_stored_by_the_time_its_last_event_arrives(server, client):
    with httpx.stream("POST", f"{server.url}/v1/responses", json={"input": "Weather in Paris?", "stream": True},
                      timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["type"] == "response.completed":
                done = json.loads(line[6:])["response"]
                stored = httpx.get(f"{server.url}/v1/responses/{done['id']}")
                break
    assert stored.status_code == 200 and stored.json()["output"] == done["output"] and done["store"] is True


def stored_gauges(server) -> tuple[float, float]:
    text = httpx.get(f"{server.url}/metrics").text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return values["swarm_panel:stored_responses"], values["swarm_panel:stored_response_bytes"]


def test_stored_responses_are_retrieved_listed_and_deleted(server, client):
    count, size = stored_gauges(server)
    first = client.responses.create(model="m", input="Weather in Paris?", tools=[FN_TOOL])
    assert stored_gauges(server)[0] == count + 1 and stored_gauges(server)[1] > size
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    inputs = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Looking."},
              {"role": "user", "content": [{"type": "input_text", "text": "Well?"}]}]
    second = client.responses.create(model="m", input=inputs, previous_response_id=first.id)
    listed = client.responses.input_items.list(second.id)
    assert [item.content[0].text for item in listed.data] == ["Well?", "Looking.", "Weather in Paris?"]
    ascending = client.responses.input_items.list(second.id, order="asc", limit=2)
    assert [item.role for item in ascending.data] == ["user", "assistant"] and ascending.has_more
    rest = client.responses.input_items.list(second.id, order="asc", after=ascending.data[-1].id)
    assert [item.content[0].text for item in rest.data] == ["Well?"] and not rest.has_more

    deleted = httpx.delete(f"{server.url}/v1/responses/{second.id}")
    assert deleted.json() == {"id": second.id, "object": "response.deleted", "deleted": True}
    assert stored_gauges(server)[0] == count + 1
    assert_error(httpx.get(f"{server.url}/v1/responses/{second.id}"), 404, code="response_not_found")
    assert_error(httpx.delete(f"{server.url}/v1/responses/{second.id}"), 404, code="response_not_found")
    assert_error(httpx.get(f"{server.url}/v1/responses/{second.id}/input_items"), 404, code="response_not_found")
    assert_error(httpx.post(f"{server.url}/v1/responses", json={"input": "hi", "previous_response_id": second.id}),
                 400, param="previous_response_id", code="previous_response_not_found")
    assert_error(httpx.get(f"{server.url}/v1/responses/{first.id}/input_items", params={"after": "nope"}), 400,
                 param="after")


def test_store_false_and_a_zero_budget_keep_nothing(server, client):
    unstored = client.responses.create(model="m", input="hi", store=False)
    assert not unstored.store
    assert_error(httpx.get(f"{server.url}/v1/responses/{unstored.id}"), 404, code="response_not_found")
    with running(modeled_service(engine_class=Scripted, responses_store_mb=0)) as none_kept:
        body = httpx.post(f"{none_kept.url}/v1/responses", json={"input": "hi"}).json()
        assert body["store"] is False
        assert_error(httpx.get(f"{none_kept.url}/v1/responses/{body['id']}"), 404, code="response_not_found")


def _stored(response_id: str, text: str) -> StoredResponse:
    response = Response(id=response_id, created_at=0, model="m", instructions=None, tools=[], tool_choice="auto",
                        parallel_tool_calls=True, temperature=1.0, top_p=1.0, max_output_tokens=None,
                        text={"format": {"type": "text"}}, metadata={}, store=True)
    return StoredResponse.of(response, [], [{"role": "user", "content": text}])


def test_the_store_forgets_the_least_recently_used_past_its_budget():
    store = ResponseStore()
    a, b, c = (_stored(name, "x" * 1000) for name in "abc")
    budget = a.size + b.size + 10
    assert store.put(a, budget) and store.put(b, budget)
    assert store.get("a") is a  # a is now the most recently used, so b goes first
    assert store.put(c, budget)
    assert store.get("b") is None and store.get("a") is a and store.get("c") is c
    assert store.bytes == a.size + c.size and len(store) == 2
    assert not store.put(_stored("huge", "x" * budget), budget) and store.get("huge") is None
    assert store.delete("a") and not store.delete("a") and store.bytes == c.size
