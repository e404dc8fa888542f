"""Tool calls in a model's output text, turned into OpenAI `tool_calls`.

Three formats, picked from the model's chat template:
- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call.
- Llama 3.x JSON: `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`, several
  separated by `;`.
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the newer
  `[TOOL_CALLS]name[ARGS]{...}` per call.

Text that does not parse as a call stays content: a model that only looked like it was calling a tool
loses nothing.
"""

from __future__ import annotations

import ast
import enum
import json
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"

_ID_ALPHABET = string.ascii_letters + string.digits
_decoder = json.JSONDecoder()


class ToolCallFormat(enum.Enum):
    HERMES = "hermes"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"


def detect_format(chat_template: str | None) -> ToolCallFormat:
    """The format the template teaches the model; Hermes (ChatML's) when it names none."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return ToolCallFormat.MISTRAL
    if HERMES_OPEN in template:
        return ToolCallFormat.HERMES
    if PYTHON_TAG in template or ("<|start_header_id|>" in template and "parameters" in template):
        return ToolCallFormat.LLAMA3
    return ToolCallFormat.HERMES


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(slots=True)
class ParsedToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = field(default_factory=new_call_id)

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def _call(obj: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")) -> ParsedToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args: Any = {}
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return ParsedToolCall(name, args)
    return ParsedToolCall(name, json.dumps(args, ensure_ascii=False))


def _json_values(text: str) -> list[Any] | None:
    """Every JSON value in text separated by whitespace or ';'; None if anything else is there."""
    values, i, n = [], 0, len(text)
    while True:
        while i < n and (text[i].isspace() or text[i] == ";"):
            i += 1
        if i >= n:
            return values
        try:
            value, i = _decoder.raw_decode(text, i)
        except ValueError:
            return None
        values.append(value)


def _python_literal(text: str) -> Any:
    """Hermes 2 Pro sometimes writes its call as a Python dict (single quotes)."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _parse_hermes(text: str) -> tuple[str, list[ParsedToolCall]] | None:
    start = text.find(HERMES_OPEN)
    if start < 0:
        return None
    calls: list[ParsedToolCall] = []
    rest = text[start:]
    for block in re.finditer(r"<tool_call>(.*?)(?:</tool_call>|\Z)", rest, re.DOTALL):
        values = _json_values(block.group(1))
        if values is None:
            values = [_python_literal(block.group(1))]
        if len(values) != 1:
            return None
        call = _call(values[0])
        if call is None:
            return None
        calls.append(call)
    return (text[:start], calls) if calls else None


def _parse_llama3(text: str) -> tuple[str, list[ParsedToolCall]] | None:
    tag = text.find(PYTHON_TAG)
    content, body = (text[:tag], text[tag + len(PYTHON_TAG):]) if tag >= 0 else ("", text)
    if tag < 0 and not body.lstrip().startswith("{"):
        return None
    values = _json_values(body)
    if not values:
        return None
    calls = [_call(v, ("parameters", "arguments")) for v in values]
    if any(c is None for c in calls):
        return None
    return content, calls  # type: ignore[return-value]


def _parse_mistral(text: str) -> tuple[str, list[ParsedToolCall]] | None:
    marker = text.find(MISTRAL_CALLS)
    if marker >= 0:
        content, body = text[:marker], text[marker + len(MISTRAL_CALLS):]
    elif text.lstrip().startswith("[{"):
        # Some GGUF detokenizers drop the control token and leave the bare array.
        content, body = "", text
    else:
        return None
    calls: list[ParsedToolCall] = []
    if body.lstrip().startswith("["):
        values = _json_values(body)
        if not values:
            return None
        for value in values:
            for obj in value if isinstance(value, list) else [value]:
                call = _call(obj)
                if call is None:
                    return None
                calls.append(call)
        return content, calls
    # The v11 format: name[ARGS]{json}, each call after its own [TOOL_CALLS].
    for piece in body.split(MISTRAL_CALLS):
        name, sep, args = piece.partition(MISTRAL_ARGS)
        name = name.strip()
        if not sep or not name:
            return None
        values = _json_values(args)
        if not values or len(values) != 1:
            return None
        calls.append(ParsedToolCall(name, json.dumps(values[0], ensure_ascii=False)))
    return content, calls


_PARSERS = {
    ToolCallFormat.HERMES: _parse_hermes,
    ToolCallFormat.LLAMA3: _parse_llama3,
    ToolCallFormat.MISTRAL: _parse_mistral,
}


def parse_tool_calls(text: str, fmt: ToolCallFormat) -> tuple[str | None, list[ParsedToolCall]]:
    """(content, calls): the content is None when only calls were there, the calls empty for none."""
    parsed = _PARSERS[fmt](text)
    if parsed is None:
        return text, []
    content, calls = parsed
    return (content.strip() or None), calls


def _start_markers(fmt: ToolCallFormat) -> tuple[str, ...]:
    return {
        ToolCallFormat.HERMES: (HERMES_OPEN,),
        ToolCallFormat.LLAMA3: (PYTHON_TAG,),
        ToolCallFormat.MISTRAL: (MISTRAL_CALLS,),
    }[fmt]


class ToolCallStreamParser:
    """Splits streamed text into content deltas and whole tool calls.

    Content streams through until text that may begin a call appears (a start marker, or for
    Llama 3 and Mistral a leading `{` / `[{`); from there the text is held back. Hermes calls are
    emitted as each block closes; the other formats are parsed when the output ends. Held text that
    turns out not to be a call is released as content at the end.
    """

    def __init__(self, fmt: ToolCallFormat) -> None:
        self.fmt = fmt
        self._markers = _start_markers(fmt)
        self._pending = ""  # text not yet sent as content (a possible marker prefix)
        self._held = ""  # text from the first marker on
        self._seen_text = False
        self.calls: list[ParsedToolCall] = []

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        """Content to send now and calls completed by this text."""
        if self._held:
            self._held += text
            return "", self._complete_hermes_blocks()
        self._pending += text
        if not self._seen_text and self._pending.strip():
            self._seen_text = True
            if self._starts_bare_call(self._pending.lstrip()):
                self._held, self._pending = self._pending, ""
                return "", []
        for marker in self._markers:
            at = self._pending.find(marker)
            if at >= 0:
                content, self._held, self._pending = self._pending[:at], self._pending[at:], ""
                return content, self._complete_hermes_blocks()
        keep = max((_prefix_overlap(self._pending, marker) for marker in self._markers), default=0)
        if not self._seen_text:
            # A reply that starts with a call may begin "{" or "[" after whitespace: wait for one more char.
            return "", []
        content = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(content):]
        return content, []

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """What is left when the output ends: content that was held and calls not yet emitted."""
        if not self._held:
            content, self._pending = self._pending, ""
            return content, []
        content, calls = parse_tool_calls(self._held, self.fmt)
        if not calls:
            held, self._held = self._held, ""
            # After calls went out, a broken last block is dropped rather than sent as content.
            return ("" if self.calls else held), []
        new = calls[len(self.calls):] if self.fmt is ToolCallFormat.HERMES else calls
        self.calls.extend(new)
        self._held = ""
        return "", new

    def _starts_bare_call(self, text: str) -> bool:
        if self.fmt is ToolCallFormat.LLAMA3:
            return text.startswith("{")
        if self.fmt is ToolCallFormat.MISTRAL:
            return text.startswith("[{") or (text.startswith("[") and len(text) == 1)
        return False

    def _complete_hermes_blocks(self) -> list[ParsedToolCall]:
        if self.fmt is not ToolCallFormat.HERMES:
            return []
        closed = self._held.count(HERMES_CLOSE)
        if closed <= len(self.calls):
            return []
        end = self._held.rfind(HERMES_CLOSE) + len(HERMES_CLOSE)
        parsed = _parse_hermes(self._held[:end])
        if parsed is None:
            return []
        new = parsed[1][len(self.calls):]
        self.calls.extend(new)
        return new


def _prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
