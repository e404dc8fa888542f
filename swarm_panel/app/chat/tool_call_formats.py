"""Parsers for one tool call in each template family's syntax, usable on a reply still arriving.

A block parser looks at text that begins with the family's opening marker and answers NEED (the
call may still complete), BAD (this is not a call), or the call and how much text it used. `final`
says no more text will come: an unclosed block is then read up to the end.
"""

from __future__ import annotations

import ast
import json
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
XML_FUNCTION, XML_FUNCTION_END = "<function=", "</function>"
XML_PARAM, XML_PARAM_END = "<parameter=", "</parameter>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"

_ID_ALPHABET = string.ascii_letters + string.digits
_decoder = json.JSONDecoder()

NEED = "need"
BAD = "bad"

# Declared tools: name -> JSON schema of its parameters (None: any name is accepted, for unit use).
Tools = dict[str, dict[str, Any]] | None


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(slots=True)
class ParsedToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = field(default_factory=new_call_id)


def declared(name: Any, tools: Tools) -> bool:
    return isinstance(name, str) and bool(name) and (tools is None or name in tools)


def call_from_object(obj: Any, tools: Tools, args_keys: tuple[str, ...] = ("arguments", "parameters"),
                     need_args: bool = False) -> ParsedToolCall | None:
    """A call from {"name", "arguments"|"parameters"} (or OpenAI's {"function": {...}}), if it names a declared tool."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not declared(name, tools):
        return None
    key = next((k for k in args_keys if k in obj), None)
    if key is None and need_args:
        return None
    args: Any = obj[key] if key is not None else {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return ParsedToolCall(name, args)
    return ParsedToolCall(name, json.dumps(args, ensure_ascii=False))


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def bracket_end(text: str, i: int) -> int | None:
    """End of the bracketed value starting at text[i] ('{' or '['), strings respected; None if not closed yet."""
    depth, quote, escaped = 0, None, False
    for j in range(i, len(text)):
        ch = text[j]
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _object_at(text: str, i: int, final: bool) -> tuple[Any, int] | str:
    """The JSON (or Python-literal, as Hermes 2 Pro writes) object at text[i], and where it ends."""
    end = bracket_end(text, i)
    if end is None:
        if not final:
            return NEED
        end = len(text)
    span = text[i:end]
    try:
        value, used = _decoder.raw_decode(span)
        if span[used:].strip():
            return BAD
        return value, end
    except ValueError:
        pass
    try:
        return ast.literal_eval(span.strip()), end
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return BAD


def _close(text: str, i: int, final: bool) -> int | str:
    """Past the closing </tool_call> at text[i] (after whitespace); an unclosed block ends the text."""
    i = skip_ws(text, i)
    if text.startswith(HERMES_CLOSE, i):
        return i + len(HERMES_CLOSE)
    rest = text[i:]
    if HERMES_CLOSE.startswith(rest):
        return len(text) if final else NEED
    return BAD


def parse_json_block(text: str, tools: Tools, final: bool) -> tuple[ParsedToolCall, int] | str:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen2.5, and our generic prompt)."""
    i = skip_ws(text, len(HERMES_OPEN))
    if i >= len(text):
        return NEED if not final else BAD
    if text[i] != "{":
        return BAD
    got = _object_at(text, i, final)
    if isinstance(got, str):
        return got
    value, end = got
    call = call_from_object(value, tools)
    if call is None:
        return BAD
    closed = _close(text, end, final)
    return closed if isinstance(closed, str) else (call, closed)


def parse_xml_block(text: str, tools: Tools, final: bool) -> tuple[ParsedToolCall, int] | str:
    """`<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>` (Qwen3-Coder, Qwen3.5).

    A value ends at a `</parameter>` followed by the next parameter or `</function>`, so values may
    hold either closing tag. A JSON body inside the tags is read as Hermes'.
    """
    i = skip_ws(text, len(HERMES_OPEN))
    if i >= len(text):
        return NEED if not final else BAD
    if text[i] == "{":
        return parse_json_block(text, tools, final)
    head = _tag_value(text, i, XML_FUNCTION, final)
    if isinstance(head, str):
        return head
    name, i = head
    if not declared(name, tools):
        return BAD
    schema = (tools or {}).get(name) or {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    args: dict[str, Any] = {}
    while True:
        i = skip_ws(text, i)
        if text.startswith(XML_FUNCTION_END, i):
            closed = _close(text, i + len(XML_FUNCTION_END), final)
            if isinstance(closed, str):
                return closed
            return ParsedToolCall(name, json.dumps(args, ensure_ascii=False)), closed
        if i >= len(text) or XML_FUNCTION_END.startswith(text[i:]) or XML_PARAM.startswith(text[i:]):
            if final:
                return ParsedToolCall(name, json.dumps(args, ensure_ascii=False)), len(text)
            return NEED
        head = _tag_value(text, i, XML_PARAM, final)
        if isinstance(head, str):
            return head
        param, start = head
        end = _param_end(text, start, final)
        if isinstance(end, str):
            return end
        value_end, i = end
        args[param] = _param_value(text[start:value_end], props.get(param))


def _tag_value(text: str, i: int, tag: str, final: bool) -> tuple[str, int] | str:
    """NAME and the position after `<tag NAME>` at text[i]."""
    if not text.startswith(tag, i):
        return NEED if tag.startswith(text[i:]) and not final else BAD
    close = text.find(">", i + len(tag))
    if close < 0:
        return NEED if not final else BAD
    name = text[i + len(tag):close].strip()
    return (name, close + 1) if name and "\n" not in name else BAD


def _param_end(text: str, start: int, final: bool) -> tuple[int, int] | str:
    """(end of the value, position after its </parameter>): the first closing tag the call's structure follows."""
    at = text.find(XML_PARAM_END, start)
    while at >= 0:
        after = at + len(XML_PARAM_END)
        rest = text[skip_ws(text, after):]
        if rest.startswith((XML_PARAM, XML_FUNCTION_END)):
            return at, after
        if not rest or XML_PARAM.startswith(rest) or XML_FUNCTION_END.startswith(rest):
            return (at, after) if final else NEED
        at = text.find(XML_PARAM_END, after)
    return (len(text), len(text)) if final else NEED


def _param_value(raw: str, schema: Any) -> Any:
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def json_values(text: str, i: int = 0) -> tuple[list[Any], int]:
    """JSON values from text[i] on, separated by whitespace or ';', and where the first non-JSON text starts."""
    values: list[Any] = []
    while True:
        j = i
        while j < len(text) and (text[j].isspace() or text[j] == ";"):
            j += 1
        if j >= len(text):
            return values, j
        try:
            value, j = _decoder.raw_decode(text, j)
        except ValueError:
            return values, i
        values.append(value)
        i = j


def parse_llama3(text: str, tools: Tools) -> tuple[str, list[ParsedToolCall]] | None:
    """`{"name": ..., "parameters": {...}}` (several separated by ';'), bare or after <|python_tag|>.

    An object counts only if it holds parameters/arguments and names a declared tool: a reply that is
    plain JSON stays content.
    """
    tag = text.find(PYTHON_TAG)
    before, start = (text[:tag], tag + len(PYTHON_TAG)) if tag >= 0 else ("", 0)
    if tag < 0 and not text.lstrip().startswith("{"):
        return None
    values, end = json_values(text, start)
    calls = []
    for value in values:
        call = call_from_object(value, tools, ("parameters", "arguments"), need_args=True)
        if call is None:
            return None
        calls.append(call)
    return (before + text[end:], calls) if calls else None


def parse_mistral(text: str, tools: Tools) -> tuple[str, list[ParsedToolCall]] | None:
    """`[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or v11's `[TOOL_CALLS]name[ARGS]{...}` per call."""
    marker = text.find(MISTRAL_CALLS)
    if marker >= 0:
        before, body = text[:marker], text[marker + len(MISTRAL_CALLS):]
    elif text.lstrip().startswith("[{"):
        # The GGUF detokenizer drops the control token and leaves the bare array.
        before, body = "", text
    else:
        return None
    calls: list[ParsedToolCall] = []
    if body.lstrip().startswith("["):
        values, end = json_values(body)
        for value in values:
            for obj in value if isinstance(value, list) else [value]:
                call = call_from_object(obj, tools)
                if call is None:
                    return None
                calls.append(call)
        return (before + body[end:], calls) if calls else None
    for piece in body.split(MISTRAL_CALLS):
        name, sep, args = piece.partition(MISTRAL_ARGS)
        name = name.strip()
        if not sep or not declared(name, tools):
            return None
        values, end = json_values(args)
        if len(values) != 1:
            return None
        calls.append(ParsedToolCall(name, json.dumps(values[0], ensure_ascii=False)))
        before += args[end:]
    return before, calls
