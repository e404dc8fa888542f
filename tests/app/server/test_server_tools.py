"""Tool calls: the parsers on real-format model output, and one round trip through the endpoint."""

from __future__ import annotations

import json

import openai
import pytest

from swarm_panel.app.chat.tool_calls import (
    ToolCallFormat,
    ToolCallStreamParser,
    detect_format,
    parse_tool_calls,
)
from swarm_panel.runtime.core.engine import RowKind, Sample
from swarm_panel.runtime.modeled.engine import ModeledEngine, ModeledTokenizer
from swarm_panel.runtime.models.demo import CHAT_TEMPLATE
from tests.app.server.test_server_common import modeled_service, running

H, L, M = ToolCallFormat.HERMES, ToolCallFormat.LLAMA3, ToolCallFormat.MISTRAL

# Snippets of the real templates (Qwen2.5, Llama 3.1, Mistral v3); detection looks only for markers.
QWEN25_TEMPLATE = (
    "{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
)
LLAMA31_TEMPLATE = (
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{%- if builtin_tools is defined %}"
    "{{- \"Environment: ipython\\n\" }}{%- endif %}{{- 'Respond in the format {\"name\": function name, "
    "\"parameters\": dictionary of argument name and its value}.' }}"
    "{%- if builtin_tools is defined and tool_call.name in builtin_tools %}{{- \"<|python_tag|>\" + tool_call.name }}"
)
MISTRAL_TEMPLATE = (
    "{%- elif message.tool_calls is defined and message.tool_calls is not none %}"
    "{{- \"[TOOL_CALLS] [\" }}{%- for tool_call in message.tool_calls %}"
)


def args(call) -> dict:
    return json.loads(call.arguments)


def test_format_follows_the_template():
    assert detect_format(QWEN25_TEMPLATE) is H
    assert detect_format(CHAT_TEMPLATE) is H
    assert detect_format(LLAMA31_TEMPLATE) is L
    assert detect_format(MISTRAL_TEMPLATE) is M
    # A template that renders no tools gets them taught in a system prompt, in Hermes tags.
    assert detect_format(None) is ToolCallFormat.GENERIC
    assert detect_format("{{ messages }}") is ToolCallFormat.GENERIC


def test_qwen_hermes_two_calls_after_some_content():
    text = (
        "Let me check both.\n<tool_call>\n"
        '{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}\n'
        "</tool_call>\n<tool_call>\n"
        '{"name": "get_temperature_date", "arguments": {"location": "San Francisco, CA, USA", "date": "2024-10-01"}}\n'
        "</tool_call>"
    )
    content, calls = parse_tool_calls(text, H)
    assert content == "Let me check both."
    assert [c.name for c in calls] == ["get_current_temperature", "get_temperature_date"]
    assert args(calls[1]) == {"location": "San Francisco, CA, USA", "date": "2024-10-01"}
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")


def test_hermes_2_pro_python_dict_and_an_unclosed_block():
    content, calls = parse_tool_calls(
        "<tool_call>\n{'arguments': {'symbol': 'TSLA'}, 'name': 'get_stock_fundamentals'}\n</tool_call>", H)
    assert content is None and calls[0].name == "get_stock_fundamentals" and args(calls[0]) == {"symbol": "TSLA"}
    _, calls = parse_tool_calls('<tool_call>\n{"name": "ls", "arguments": "{\\"path\\": \\"/tmp\\"}"}', H)
    assert calls[0].name == "ls" and args(calls[0]) == {"path": "/tmp"}


def test_llama3_json_bare_and_after_python_tag():
    content, calls = parse_tool_calls(
        '{"name": "get_current_conditions", "parameters": {"location": "Boston, MA", "unit": "Fahrenheit"}}', L)
    assert content is None
    assert calls[0].name == "get_current_conditions"
    assert args(calls[0]) == {"location": "Boston, MA", "unit": "Fahrenheit"}
    _, calls = parse_tool_calls(
        '<|python_tag|>{"name": "search", "parameters": {"q": "llama"}}; {"name": "open", "parameters": {"id": 3}}', L)
    assert [c.name for c in calls] == ["search", "open"] and args(calls[1]) == {"id": 3}


def test_mistral_array_and_v11_formats():
    content, calls = parse_tool_calls(
        '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", '
        '"format": "celsius"}}]', M)
    assert content is None and calls[0].name == "get_current_weather"
    assert args(calls[0]) == {"location": "Paris, France", "format": "celsius"}
    _, calls = parse_tool_calls('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}', M)
    assert [c.name for c in calls] == ["get_weather", "get_time"] and args(calls[0]) == {"city": "Paris"}
    # A detokenizer that drops the control token leaves the bare array.
    _, calls = parse_tool_calls('[{"name": "f", "arguments": {"x": 1}}]', M)
    assert calls[0].name == "f"


@pytest.mark.parametrize("fmt", [H, L, M])
def test_plain_text_and_broken_calls_stay_content(fmt):
    for text in ["Just an answer, no tools.", "<tool_call>\n{not json}\n</tool_call>", '{"name": 5}',
                 "[TOOL_CALLS] nonsense", "[1, 2, 3] are numbers"]:
        content, calls = parse_tool_calls(text, fmt)
        assert calls == [] and content == text


STREAM_CASES = [
    (H, 'Sure.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>', "Sure.", ["read_file", "run_tests"]),
    (L, '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}', "", ["read_file"]),
    (L, ' {"name": "read_file", "parameters": {"path": "a.py"}}', "", ["read_file"]),
    (M, '[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "a.py"}}]', "", ["read_file"]),
    (H, "No tools needed: 1 < 2 and <tool is a word.", "No tools needed: 1 < 2 and <tool is a word.", []),
    (L, "Plain answer {with braces} later.", "Plain answer {with braces} later.", []),
]


@pytest.mark.parametrize(("fmt", "text", "content", "names"), STREAM_CASES)
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_stream_parser_matches_whole_parse_for_any_split(fmt, text, content, names, piece):
    parser = ToolCallStreamParser(fmt)
    streamed, calls = "", []
    for i in range(0, len(text), piece):
        delta, new = parser.feed(text[i : i + piece])
        streamed += delta
        calls += new
    delta, new = parser.finish()
    streamed += delta
    calls += new
    assert streamed == content
    assert [c.name for c in calls] == names


def test_hermes_stream_emits_each_call_as_its_block_closes():
    parser = ToolCallStreamParser(H)
    _, first = parser.feed('<tool_call>{"name": "a", "arguments": {}}</tool_call>')
    assert [c.name for c in first] == ["a"]
    _, second = parser.feed('\n<tool_call>{"name": "b", "arguments": {"k": 1}}</tool_call>')
    assert [c.name for c in second] == ["b"]
    assert parser.finish() == ("", [])


# -- through the endpoint --------------------------------------------------------------------------

SCRIPTS = {
    H: (QWEN25_TEMPLATE, 'I will look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    L: (LLAMA31_TEMPLATE, '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    M: (MISTRAL_TEMPLATE, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def scripted_engine(fmt: ToolCallFormat) -> type[ModeledEngine]:
    template, script = SCRIPTS[fmt]
    pieces = [script[i : i + 4] for i in range(0, len(script), 4)]

    class ScriptedText(ModeledTokenizer):
        """The modeled tokenizer with the format's template, recording each prompt rendered."""

        @property
        def chat_template(self) -> str:
            return template

        def apply_chat_template(self, messages, tools=None, add_generation_prompt=True):
            prompt = super().apply_chat_template(messages, tools, add_generation_prompt)
            Scripted.prompts.append(prompt)
            return prompt

    class Scripted(ModeledEngine):
        """The modeled engine, but its output text is the script, four characters a token, then an
        end-of-generation token (token i of the output is piece i; the end token adds no text)."""

        prompts: list[str] = []

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tokenizer = ScriptedText()

        def step(self, plan):
            result = super().step(plan)
            for row in plan.rows:
                if row.sample and row.kind is not RowKind.PADDING:
                    i = row.request.num_output_tokens
                    result.samples[row.request.request_id] = Sample(token=i, end=i >= len(pieces))
            return result

        def piece(self, token):
            return pieces[token].encode() if token < len(pieces) else b""

    return Scripted


@pytest.mark.parametrize("fmt", [H, L, M])
def test_tool_call_round_trip_through_the_endpoint(fmt):
    engine_class = scripted_engine(fmt)
    with running(modeled_service(engine_class=engine_class)) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        whole = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="auto")
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == ("I will look." if fmt is H else None)
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        assert "get_weather" in engine_class.prompts[-1]  # the tools reached the chat template

        stream = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)
        deltas, finish = [], None
        for chunk in stream:
            delta = chunk.choices[0].delta
            deltas += delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls"
        assert [(d.index, d.function.name) for d in deltas] == [(0, "get_weather")]
        assert json.loads(deltas[0].function.arguments) == {"city": "Paris"} and deltas[0].id.startswith("call_")

        # The client runs the tool and sends the result back, as agents do.
        followup = messages + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'},
        ]
        again = client.chat.completions.create(model="m", messages=followup, tools=TOOLS)
        assert again.choices[0].finish_reason == "tool_calls"
        assert '{"temp_c": 18}' in engine_class.prompts[-1]

        # tool_choice "none": no tools in the template and the text comes back as it is.
        plain = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice="none")
        assert plain.choices[0].message.tool_calls is None
        assert plain.choices[0].message.content == SCRIPTS[fmt][1]
        assert plain.choices[0].finish_reason == "stop"
        assert "get_weather" not in engine_class.prompts[-1]
