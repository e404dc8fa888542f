"""Tool calls in a model's reply, turned into OpenAI `tool_calls`, streamed or whole.

The format is picked from the model's chat template (app.chat.tool_call_formats holds the syntaxes):
- Hermes / Qwen2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call.
- Qwen3-Coder / Qwen3.5: `<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`.
- Llama 3.x: `{"name": ..., "parameters": {...}}`, bare or after `<|python_tag|>`, several split by `;`.
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`, or `[TOOL_CALLS]name[ARGS]{...}` per call.
- Generic: a template that renders no tools; the server teaches Hermes tags in a system prompt.

Only a call naming a declared tool is a call; anything else stays content, and so does the text
before, between and after calls.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from swarm_panel.app.chat.tool_call_formats import (
    BAD,
    HERMES_OPEN,
    MISTRAL_CALLS,
    NEED,
    PYTHON_TAG,
    ParsedToolCall,
    Tools,
    parse_json_block,
    parse_llama3,
    parse_mistral,
    parse_xml_block,
)

__all__ = ["ToolCallFormat", "ToolCallStreamParser", "detect_format", "parse_tool_calls"]


class ToolCallFormat(enum.Enum):
    HERMES = "hermes"
    QWEN_XML = "qwen_xml"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    GENERIC = "generic"

    @property
    def tagged(self) -> bool:
        """Calls sit in <tool_call> blocks anywhere in the reply (else they are the reply's tail)."""
        return self in (ToolCallFormat.HERMES, ToolCallFormat.QWEN_XML, ToolCallFormat.GENERIC)


def detect_format(chat_template: str | None) -> ToolCallFormat:
    """The format the template teaches the model; GENERIC when it renders no tools at all."""
    template = chat_template or ""
    if MISTRAL_CALLS in template:
        return ToolCallFormat.MISTRAL
    if "<function=" in template and "<parameter=" in template:
        return ToolCallFormat.QWEN_XML
    if HERMES_OPEN in template:
        return ToolCallFormat.HERMES
    if PYTHON_TAG in template or ("<|start_header_id|>" in template and "parameters" in template):
        return ToolCallFormat.LLAMA3
    if "tools" in template:
        return ToolCallFormat.HERMES
    return ToolCallFormat.GENERIC


def parse_tool_calls(text: str, fmt: ToolCallFormat, tools: Tools = None) -> tuple[str | None, list[ParsedToolCall]]:
    """(content, calls): the content is None when only calls were there, the calls empty for none."""
    parser = ToolCallStreamParser(fmt, tools)
    content, calls = parser.feed(text)
    rest, more = parser.finish()
    return (content + rest).strip() or None, calls + more


class ToolCallStreamParser:
    """Splits streamed text into content deltas and whole tool calls.

    Tagged formats: content streams until text that may open a block; the block is held until it
    closes (or turns out not to be a call, and goes out as content); then content streams again.
    Whitespace between calls is dropped. Llama 3 and Mistral calls are the reply's tail: from the
    marker (or a leading `{` / `[{`) the text is held and parsed when the reply ends.
    """

    def __init__(self, fmt: ToolCallFormat, tools: Tools = None) -> None:
        self.fmt = fmt
        self.tools = tools
        self._block: Callable[[str, Tools, bool], tuple[ParsedToolCall, int] | str] = (
            parse_xml_block if fmt is ToolCallFormat.QWEN_XML else parse_json_block)
        self._marker = HERMES_OPEN if fmt.tagged else (PYTHON_TAG if fmt is ToolCallFormat.LLAMA3 else MISTRAL_CALLS)
        self._pending = ""  # content not yet sent (a possible marker prefix)
        self._held = ""  # from an opening marker on
        self._blank = ""  # trailing whitespace, sent only if content follows (never right before a call)
        self._seen_text = False
        self.calls: list[ParsedToolCall] = []

    def feed(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        """Content to send now and calls completed by this text."""
        if self._held:
            self._held += text
            if not self.fmt.tagged:
                return "", []
        else:
            self._pending += text
        return self._advance(final=False)

    def finish(self) -> tuple[str, list[ParsedToolCall]]:
        """What is left when the reply ends: held content and calls not yet emitted."""
        if self.fmt.tagged:
            content, calls = self._advance(final=True)
            blank, self._blank = self._blank, ""
            return content + ("" if self.calls else blank), calls
        held, self._held = self._held, ""
        pending, self._pending = self._pending, ""
        if not held:
            return pending, []
        parse = parse_llama3 if self.fmt is ToolCallFormat.LLAMA3 else parse_mistral
        parsed = parse(held, self.tools)
        if parsed is None:
            return held, []
        content, calls = parsed
        self.calls.extend(calls)
        return content.strip(), calls

    # -- tagged formats ----------------------------------------------------------------------------

    def _advance(self, final: bool) -> tuple[str, list[ParsedToolCall]]:
        out: list[str] = []
        calls: list[ParsedToolCall] = []
        while True:
            if self._held:
                got = self._block(self._held, self.tools, final)
                if got == NEED:
                    break
                if got == BAD:
                    # Not a call after all: the marker is content and the text after it is looked at again.
                    out.append(self._content(self._held[: len(self._marker)]))
                    self._pending = self._held[len(self._marker):] + self._pending
                    self._held = ""
                else:
                    call, used = got
                    calls.append(call)
                    self.calls.append(call)
                    self._blank = ""
                    self._pending = self._held[used:] + self._pending
                    self._held = ""
                continue
            if not self.fmt.tagged:
                out.append(self._untagged_content(final))
                break
            at = self._pending.find(self._marker)
            if at >= 0:
                out.append(self._content(self._pending[:at]))
                self._held, self._pending = self._pending[at:], ""
                continue
            keep = 0 if final else _prefix_overlap(self._pending, self._marker)
            out.append(self._content(self._pending[: len(self._pending) - keep]))
            self._pending = self._pending[len(self._pending) - keep:]
            break
        return "".join(out), calls

    def _content(self, text: str) -> str:
        text = self._blank + text
        kept = text.rstrip()
        self._blank = text[len(kept):]
        return kept

    # -- Llama 3 and Mistral -----------------------------------------------------------------------

    def _untagged_content(self, final: bool) -> str:
        if not self._seen_text and self._pending.strip():
            self._seen_text = True
            head = self._pending.lstrip()
            bare = head.startswith("{") if self.fmt is ToolCallFormat.LLAMA3 else head.startswith(("[{", "["))
            if bare and (self.fmt is ToolCallFormat.LLAMA3 or head.startswith("[{") or len(head) == 1):
                self._held, self._pending = self._pending, ""
                return ""
        at = self._pending.find(self._marker)
        if at >= 0:
            content, self._held, self._pending = self._pending[:at], self._pending[at:], ""
            return content
        if not self._seen_text and not final:
            # A reply that starts with a call may begin "{" or "[" after whitespace: wait for one more char.
            return ""
        keep = 0 if final else _prefix_overlap(self._pending, self._marker)
        content = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(content):]
        return content


def _prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
