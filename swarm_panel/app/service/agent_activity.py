"""Each agent's latest request, for the panel's live view: what it asked and what is streaming back.

The HTTP layer records a request when it submits it; the view reads the request's own output text
on the panel's timer, so nothing here runs per token.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from swarm_panel.runtime.core.request import Request

# Agents remembered; the least recently active are forgotten first.
MAX_AGENTS = 256
PREVIEW_CHARS = 4000


@dataclass(slots=True, frozen=True)
class AgentTurn:
    agent: str
    request: Request
    # The last user message (or the prompt's tail), as the agent sent it.
    asked: str
    started: float
    # The model's tool-call format, to show calls in the finished reply (None: no tools declared).
    tool_format: object | None = None

    @property
    def answer(self) -> str:
        return "".join(self.request.output_text_parts)

    @property
    def finish_reason(self) -> str | None:
        return self.request.finish_reason if self.request.is_finished else None


class AgentActivity:
    def __init__(self, max_agents: int = MAX_AGENTS) -> None:
        self._lock = threading.Lock()
        self._turns: OrderedDict[str, AgentTurn] = OrderedDict()
        self.max_agents = max_agents

    def began(self, agent: str, request: Request, asked: str, tool_format: object | None = None) -> None:
        turn = AgentTurn(agent, request, asked[-PREVIEW_CHARS:], time.monotonic(), tool_format)
        with self._lock:
            self._turns[agent] = turn
            self._turns.move_to_end(agent)
            while len(self._turns) > self.max_agents:
                self._turns.popitem(last=False)

    def latest(self, agent: str) -> AgentTurn | None:
        with self._lock:
            return self._turns.get(agent)

    def turns(self) -> list[AgentTurn]:
        with self._lock:
            return list(self._turns.values())

    def agent_of(self, request_id: int) -> str | None:
        with self._lock:
            for turn in self._turns.values():
                if turn.request.request_id == request_id:
                    return turn.agent
        return None

    def clear(self) -> None:
        with self._lock:
            self._turns.clear()


def last_user_text(messages: list[dict]) -> str:
    """The newest user (or tool) message's text: what the agent is asking about right now."""
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def tool_calls_of(turn: AgentTurn, text: str) -> list[tuple[str, str]]:
    """(name, arguments) of each tool call in a finished reply, read with the model's own format."""
    if turn.tool_format is None:
        return []
    from swarm_panel.app.chat.tool_calls import parse_tool_calls

    _, calls = parse_tool_calls(text, turn.tool_format)
    return [(call.name, call.arguments) for call in calls]
