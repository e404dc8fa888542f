"""One choice's raw text, split into reasoning, content and tool calls as it streams."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from swarm_panel.app.chat.reasoning import ReasoningSplitter, ThinkTags
from swarm_panel.app.chat.tool_call_formats import ParsedToolCall, Tools
from swarm_panel.app.chat.tool_calls import ToolCallFormat, ToolCallStreamParser

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplyPiece:
    kind: Literal["reasoning", "content", "call"]
    text: str = ""
    call: ParsedToolCall | None = None


@dataclass(slots=True)
class Reply:
    """A whole reply, as the non-streaming endpoints return it."""

    reasoning: str = ""
    content: str = ""
    calls: list[ParsedToolCall] = field(default_factory=list)

    def add(self, pieces: list[ReplyPiece]) -> None:
        for piece in pieces:
            if piece.kind == "reasoning":
                self.reasoning += piece.text
            elif piece.kind == "content":
                self.content += piece.text
            else:
                self.calls.append(piece.call)


class ReplyParser:
    """Think tags first (when the template has them), then tool calls in what is left (when tools were offered)."""

    def __init__(self, fmt: ToolCallFormat | None = None, tools: Tools = None, parallel: bool = True,
                 think: ThinkTags | None = None, thinking: bool = False) -> None:
        self._think = ReasoningSplitter(think, thinking) if think is not None else None
        self._tools = ToolCallStreamParser(fmt, tools) if fmt is not None else None
        self._parallel = parallel
        self._num_calls = 0

    def feed(self, text: str) -> list[ReplyPiece]:
        return self._pieces(text, final=False)

    def finish(self) -> list[ReplyPiece]:
        return self._pieces("", final=True)

    def _pieces(self, text: str, final: bool) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        content = text
        if self._think is not None:
            reasoning, content = self._think.finish() if final else self._think.feed(text)
            if reasoning:
                pieces.append(ReplyPiece("reasoning", reasoning))
        calls: list[ParsedToolCall] = []
        if self._tools is not None:
            content, calls = self._tools.feed(content)
            if final:
                rest, more = self._tools.finish()
                content, calls = content + rest, calls + more
        if content:
            pieces.append(ReplyPiece("content", content))
        for call in calls:
            if self._num_calls and not self._parallel:
                log.debug("dropping a second tool call (%s): parallel_tool_calls is false", call.name)
                continue
            self._num_calls += 1
            pieces.append(ReplyPiece("call", call=call))
        return pieces
