"""Tool-call formats per template family on real template-style output, streamed and whole, and think tags."""

from __future__ import annotations

import json

import pytest

from swarm_panel.app.chat.reasoning import ReasoningSplitter, ThinkTags, starts_thinking, think_tags
from swarm_panel.app.chat.request import Reply, ReplyParser
from swarm_panel.app.chat.tool_calls import ToolCallFormat, ToolCallStreamParser, detect_format, parse_tool_calls

H, X, L, M, G = (ToolCallFormat.HERMES, ToolCallFormat.QWEN_XML, ToolCallFormat.LLAMA3, ToolCallFormat.MISTRAL,
                 ToolCallFormat.GENERIC)
TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
    "write_file": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}},
}
# The tool section of Qwen3-Coder's template (Qwen3.5 teaches the same XML).
QWEN3_CODER_TEMPLATE = (
    "{{- '\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:\\n\\n"
    "<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n"
    "</function>\\n</tool_call>' }}"
)
SMOLLM2_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def whole_and_streamed(text: str, fmt: ToolCallFormat, tools=TOOLS) -> tuple[str | None, list[tuple[str, dict]]]:
    """The whole parse, after checking that every split of the stream gives the same content and calls."""
    content, calls = parse_tool_calls(text, fmt, tools)
    expected = [(c.name, json.loads(c.arguments)) for c in calls]
    for piece in (1, 2, 5, 1000):
        parser = ToolCallStreamParser(fmt, tools)
        streamed, got = "", []
        for i in range(0, len(text), piece):
            delta, new = parser.feed(text[i:i + piece])
            streamed, got = streamed + delta, got + new
        delta, new = parser.finish()
        streamed, got = streamed + delta, got + new
        assert (streamed.strip() or None) == content, (piece, streamed)
        assert [(c.name, json.loads(c.arguments)) for c in got] == expected, piece
    return content, expected


def test_each_family_is_detected_from_its_template():
    assert detect_format(QWEN3_CODER_TEMPLATE) is X
    assert detect_format(SMOLLM2_TEMPLATE) is G
    assert detect_format("{% if tools %}{{ tools | tojson }}{% endif %}") is H


def test_hermes_keeps_text_before_and_after_the_call():
    content, calls = whole_and_streamed(
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "I asked for the weather.", H)
    assert calls == [("get_weather", {"city": "Paris"})]
    assert content.startswith("Let me check.") and content.endswith("I asked for the weather.")


def test_a_closing_tag_inside_an_argument_does_not_split_the_call():
    text = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.md", "text": "x </tool_call> y"}}\n</tool_call>'
    assert whole_and_streamed(text, H) == (None, [("write_file", {"path": "a.md", "text": "x </tool_call> y"})])


def test_qwen3_coder_xml_calls_with_typed_parameters_and_tags_in_values():
    text = (
        "I'll look and write it down.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n"
        "<parameter=path>\nnotes.md\n</parameter>\n<parameter=text>\nsee </parameter> and </tool_call>\nhere\n"
        "</parameter>\n</function>\n</tool_call>"
    )
    content, calls = whole_and_streamed(text, X)
    assert content == "I'll look and write it down."
    assert calls == [("get_weather", {"city": "Paris", "days": 3}),
                     ("write_file", {"path": "notes.md", "text": "see </parameter> and </tool_call>\nhere"})]


def test_a_call_of_an_undeclared_tool_or_plain_json_stays_content():
    bob = '{"name": "Bob", "age": 3}'
    assert whole_and_streamed(bob, L) == (bob, [])
    # Even named like a tool, Llama 3 JSON without parameters is a plain reply.
    assert whole_and_streamed('{"name": "get_weather"}', L) == ('{"name": "get_weather"}', [])
    stray = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    assert whole_and_streamed(stray, H) == (stray, [])
    assert whole_and_streamed('<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>', X)[1] == []


def test_llama3_and_mistral_calls():
    content, calls = whole_and_streamed('{"name": "get_weather", "parameters": {"city": "Boston"}}', L)
    assert (content, calls) == (None, [("get_weather", {"city": "Boston"})])
    content, calls = whole_and_streamed(
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "write_file", "arguments": {"path": "p"}}]', M)
    assert calls == [("get_weather", {"city": "Paris"}), ("write_file", {"path": "p"})]
    assert whole_and_streamed('[{"name": "nobody", "arguments": {}}]', M)[1] == []


def test_parallel_tool_calls_false_keeps_the_first_call_only():
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "B"}}</tool_call>')
    for parallel, cities in ((True, ["A", "B"]), (False, ["A"])):
        reply = Reply()
        parser = ReplyParser(H, TOOLS, parallel=parallel)
        reply.add(parser.feed(text))
        reply.add(parser.finish())
        assert [json.loads(c.arguments)["city"] for c in reply.calls] == cities


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_think_tags_go_to_reasoning_also_when_the_prompt_opened_them(piece):
    tags = think_tags("{{ '<think>\\n\\n</think>\\n\\n' }}")
    assert tags == ThinkTags() and think_tags(SMOLLM2_TEMPLATE) is None
    assert starts_thinking("<|im_start|>assistant\n<think>\n", tags)
    for opened, text in ((False, "<think>plan it</think>\nThe answer. <think> stays text"),
                         (True, "plan it</think>\nThe answer. <think> stays text")):
        splitter = ReasoningSplitter(tags, thinking=opened)
        reasoning = content = ""
        for i in range(0, len(text), piece):
            r, c = splitter.feed(text[i:i + piece])
            reasoning, content = reasoning + r, content + c
        r, c = splitter.finish()
        assert (reasoning + r, content + c) == ("plan it", "The answer. <think> stays text")


def test_reasoning_and_a_call_in_one_reply():
    reply = Reply()
    parser = ReplyParser(H, TOOLS, think=ThinkTags(), thinking=False)
    reply.add(parser.feed('<think>need weather</think>\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'))
    reply.add(parser.finish())
    assert reply.reasoning == "need weather" and reply.content.strip() == ""
    assert [c.name for c in reply.calls] == ["get_weather"]
