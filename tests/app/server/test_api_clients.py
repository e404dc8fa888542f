"""The official SDKs and agent frameworks against the real bundled model (SmolLM2-135M-Instruct) over a port.

Each test is one of the client checks an agent depends on; constrained output is parsed and
validated against its schema, so a model that merely talks about JSON fails.
"""

from __future__ import annotations

import asyncio
import json
import re

import anthropic
import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from swarm_panel.app.service.engine_service import SwarmService
from tests.app.server.test_server_common import running, settings

pytestmark = pytest.mark.slow

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": CITY}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time in a city", "parameters": CITY}},
]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def real(real_model_path):
    service = SwarmService(settings(engine="llama", model=real_model_path, n_ctx=4096, n_batch=256, num_lanes=4,
                                    threads=1))
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.fixture(scope="module")
def client(real):
    with openai.OpenAI(base_url=f"{real.url}/v1", api_key="x", max_retries=0, timeout=120) as c:
        yield c


def _call_args(call, schema=CITY) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, schema)
    return args


def test_tool_choice_required_and_named_give_valid_calls(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    required = client.chat.completions.create(model="m", messages=ask, tools=TOOLS, tool_choice="required",
                                              max_tokens=60, temperature=0)
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name in {"get_weather", "get_time"}
    _call_args(call)
    named = client.chat.completions.create(model="m", messages=ask, tools=TOOLS, max_tokens=60, temperature=0,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["get_time"]
    _call_args(named.choices[0].message.tool_calls[0])


def _assert_json_reply(choice, max_tokens: int, completion_tokens: int, schema: dict | None) -> None:
    """The grammar's promise, whatever the model chooses to say: a reply it ended is whole JSON (of the
    schema, where one was given); one the limit cut is max_tokens long and still an object's start."""
    assert choice.finish_reason in {"stop", "length"}
    if choice.finish_reason == "length":
        assert completion_tokens == max_tokens
        assert choice.message.content.lstrip().startswith("{")
        return
    value = json.loads(choice.message.content)
    assert isinstance(value, dict)
    if schema is not None:
        jsonschema.validate(value, schema)


def test_response_format_json_schema_and_json_object(client):
    ask = [{"role": "user", "content": "Give me a JSON object for a person named Bob aged 3."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    shaped = client.chat.completions.create(model="m", messages=ask, response_format=fmt, max_tokens=40, temperature=0)
    _assert_json_reply(shaped.choices[0], 40, shaped.usage.completion_tokens, PERSON)
    loose = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "List three fruits in JSON."}],
                                           response_format={"type": "json_object"}, max_tokens=100, temperature=0)
    _assert_json_reply(loose.choices[0], 100, loose.usage.completion_tokens, None)


def _prefix_hits(real) -> float:
    text = httpx.get(f"{real.url}/metrics", timeout=10).text
    return float(re.search(r"^swarm_panel:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M).group(1))


def test_n_choices_share_one_prefill_and_report_logprobs(client, real):
    before = _prefix_hits(real)
    ask = [{"role": "user", "content": "Name a colour of the rainbow, quickly, for test n3."}]
    result = client.chat.completions.create(model="m", messages=ask, n=3, max_tokens=6, temperature=0.9, seed=7,
                                            logprobs=True, top_logprobs=2)
    assert [c.index for c in result.choices] == [0, 1, 2]
    prompt = result.usage.prompt_tokens
    # One lane computed the prompt; the other two copied all of it but the last token from that lane.
    assert _prefix_hits(real) - before >= 2 * (prompt - 1)
    for choice in result.choices:
        entries = choice.logprobs.content
        assert entries and all(e.logprob <= 0 and len(e.top_logprobs) == 2 for e in entries)
        assert all(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.logprob - 1e-6 or
                   e.token in {t.token for t in e.top_logprobs} for e in entries)
        assert "".join(e.token for e in entries).startswith(choice.message.content[:1])
    assert result.usage.completion_tokens == sum(len(c.logprobs.content) for c in result.choices) or \
        any(c.finish_reason == "stop" for c in result.choices)

    stream = client.chat.completions.create(model="m", messages=ask, max_tokens=4, temperature=0, stream=True,
                                            logprobs=True)
    streamed = [e for chunk in stream for c in chunk.choices if c.logprobs for e in c.logprobs.content]
    assert len(streamed) >= 1 and all(e.logprob <= 0 for e in streamed)
    legacy = client.completions.create(model="m", prompt="The sky is", max_tokens=3, temperature=0, logprobs=2)
    assert len(legacy.choices[0].logprobs.tokens) == 3
    assert all(len(top) == 2 for top in legacy.choices[0].logprobs.top_logprobs)


def test_responses_plain_and_streamed_function_tools(client):
    plain = client.responses.create(model="m", input="What is the capital of France?", instructions="Answer briefly.",
                                    max_output_tokens=60, temperature=0)
    assert plain.status in {"completed", "incomplete"} and plain.output_text.strip()
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
              "parameters": CITY, "strict": True} for t in TOOLS]
    with client.responses.stream(model="m", input="What is the weather in Paris?", tools=tools,
                                 tool_choice="required", max_output_tokens=60, temperature=0) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds
    (call,) = [item for item in final.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), CITY)
    shaped = client.responses.create(model="m", input="Give me a JSON object for a person named Bob aged 3.",
                                     max_output_tokens=40, temperature=0,
                                     text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}})
    jsonschema.validate(json.loads(shaped.output_text), PERSON)


def test_a_responses_chain_follows_previous_response_id_from_the_cache(client):
    first = client.responses.create(model="m", input="Name a colour.", max_output_tokens=16, temperature=0)
    second = client.responses.create(model="m", previous_response_id=first.id, input="Name another one.",
                                     max_output_tokens=16, temperature=0)
    assert second.previous_response_id == first.id and second.output_text.strip()
    # The stored conversation is the new prompt's prefix, and its KV is still in the prefix cache.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert client.responses.retrieve(second.id).output_text == second.output_text


class Capital(BaseModel):
    """An answer the SDK asks for as a JSON schema: the grammar ends it within max_tokens whatever the
    model would write freely (the SDK raises on a reply cut at the limit, and where a small model's
    free answer stops differs between CPUs)."""

    city: str = Field(max_length=24)


def test_the_agents_sdk_continues_a_conversation_by_previous_response_id(client, real):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{real.url}/v1", api_key="x", max_retries=0) as aclient:
            agent = Agent(name="chat", instructions="Be brief.", model=OpenAIResponsesModel("smol", aclient),
                          model_settings=ModelSettings(max_tokens=64, temperature=0), output_type=Capital)
            one = await Runner.run(agent, "What is the capital of France?")
            two = await Runner.run(agent, "And of Italy?", previous_response_id=one.last_response_id)
            return one, two

    one, two = asyncio.run(main())
    assert isinstance(two.final_output, Capital) and len(two.final_output.city) <= 24
    stored = client.responses.retrieve(two.last_response_id)
    assert stored.previous_response_id == one.last_response_id
    assert [item.content[0].text for item in client.responses.input_items.list(two.last_response_id).data] == \
        ["And of Italy?"]


def test_anthropic_messages_plain_streamed_tools_and_count(real):
    client = anthropic.Anthropic(base_url=real.url, api_key="x", max_retries=0, timeout=120)
    plain = client.messages.create(model="m", max_tokens=12, system="Be brief.",
                                   messages=[{"role": "user", "content": "Say hi"}], extra_body={"temperature": 0})
    assert plain.content[0].type == "text" and plain.content[0].text
    assert plain.stop_reason in {"end_turn", "max_tokens"} and plain.usage.output_tokens > 0
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": CITY}]
    with client.messages.stream(model="m", max_tokens=60, tools=tools, tool_choice={"type": "any"},
                                messages=[{"role": "user", "content": "Weather in Paris?"}],
                                extra_body={"temperature": 0}) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert message.stop_reason == "tool_use"
    (use,) = [b for b in message.content if b.type == "tool_use"]
    jsonschema.validate(use.input, CITY)
    # The result goes back as a tool_result block, as Claude Code sends it.
    again = client.messages.create(model="m", max_tokens=8, tools=tools, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C and sunny"}]},
    ])
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens > message.usage.input_tokens
    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "Say hi"}])
    assert counted.input_tokens > 2


def test_openai_agents_sdk_with_both_models(real):
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        return f"sunny in {city}"

    async def main() -> list[tuple[str, str]]:
        async with openai.AsyncOpenAI(base_url=f"{real.url}/v1", api_key="x", max_retries=0) as aclient:
            out = []
            for model in (OpenAIResponsesModel("smol", aclient), OpenAIChatCompletionsModel("smol", aclient)):
                agent = Agent(name="plain", instructions="Be brief.", model=model, output_type=Capital,
                              model_settings=ModelSettings(max_tokens=64, temperature=0))
                answer = (await Runner.run(agent, "What is the capital of France?")).final_output
                agent = Agent(name="tools", instructions="Use tools.", model=model, tools=[get_weather],
                              tool_use_behavior="stop_on_first_tool",
                              model_settings=ModelSettings(max_tokens=80, temperature=0, tool_choice="required"))
                run = Runner.run_streamed(agent, "What is the weather in Paris?")
                async for _ in run.stream_events():
                    pass
                out.append((answer, run.final_output))
            return out

    for answer, tool_output in asyncio.run(main()):
        assert isinstance(answer, Capital) and len(answer.city) <= 24
        assert tool_output.startswith("sunny in ")


def test_langchain_and_pydantic_ai(real):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    llm = ChatOpenAI(base_url=f"{real.url}/v1", api_key="x", model="smol", max_tokens=60, temperature=0)

    @tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        return "sunny"

    assert llm.invoke("Say hi").content
    assert "".join(chunk.content for chunk in llm.stream("Say hi"))
    (call,) = llm.bind_tools([get_weather], tool_choice="required").invoke("Weather in Paris?").tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)

    class Person(BaseModel):
        name: str
        age: int

    # pydantic-ai returns structured output through a tool it forces; the grammar makes it valid.
    agent = Agent(OpenAIChatModel("smol", provider=OpenAIProvider(base_url=f"{real.url}/v1", api_key="x")),
                  output_type=Person, model_settings={"max_tokens": 80, "temperature": 0})
    person = agent.run_sync("Bob is 3 years old. Extract the person.").output
    assert isinstance(person, Person)
