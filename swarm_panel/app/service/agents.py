"""Who a request comes from, and what each agent's requests are doing and did.

Keys. A request's key says who sends it: the panel (the user, their own clients), or one launched agent.
A launched agent gets a key of its own (`AgentKeys.issue`), revoked when it ends; the server serves whatever
that key sends as that agent, on the inference routes only. The panel's key steers the server (the scheduler
and its policy): the user's --api-key where one is set, else a key made here at start, which the panel holds
in-process and a CLI on the same machine reads from a file only the user can read (app.service.panel_key_file).

Activity. The requests each agent has open now (`InflightAgents`: the panel's "connected agents") and its
latest one, for the panel's live view: what it asked and what is streaming back (`AgentActivity`). The HTTP
layer records a request when it submits it; the view reads the request's own output text on the panel's
timer, so nothing here runs per token.

The log. One line per request: who asked, through which endpoint, what it cost and how it ended. A user
watching a harness stall needs to see its requests: the prompt tokens computed and reused, the output, the
finish, the status and the time to first token. Records are kept in a bounded ring (the panel and
`swarm-panel agents run` read an agent's turns from it) and written to the `swarm_panel.requests` logger:
INFO for answered requests, WARNING with the message for errors.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from swarm_panel.runtime.core.request import Request

log = logging.getLogger(__name__)
request_lines = logging.getLogger("swarm_panel.requests")

KEY_BYTES = 32
PANEL, AGENT, NO_KEY, UNKNOWN = "panel", "agent", "no key", "unknown key"
# Agents remembered; the least recently active are forgotten first.
MAX_AGENTS = 256
PREVIEW_CHARS = 4000
MAX_RECORDS = 4096


# -- who a request comes from ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Caller:
    """Who a key names: PANEL, AGENT (with the agent's name), NO_KEY or UNKNOWN."""

    kind: str
    agent: str | None = None


def _digest(key: str) -> bytes:
    # Looked up by digest: a dict probe on the secret itself could leak its bytes through timing.
    return hashlib.sha256(key.encode()).digest()


class AgentKeys:
    """The panel's key and the keys handed to launched agents; thread-safe (the launcher's loop issues,
    the server's loop checks)."""

    def __init__(self, user_key: Callable[[], str | None] = lambda: None) -> None:
        self._user_key = user_key
        self.generated = secrets.token_urlsafe(KEY_BYTES)
        self._lock = threading.Lock()
        self._agents: dict[bytes, str] = {}

    @property
    def user_set(self) -> bool:
        """Whether the user set --api-key: then every route needs a key, theirs or an agent's."""
        return bool(self._user_key())

    @property
    def panel_key(self) -> str:
        return self._user_key() or self.generated

    def issue(self, name: str) -> str:
        """A new key that is good for `name`'s inference until revoked."""
        key = secrets.token_urlsafe(KEY_BYTES)
        with self._lock:
            self._agents[_digest(key)] = name
        log.info("issued agent %s its key", name)
        return key

    def revoke(self, key: str) -> None:
        with self._lock:
            name = self._agents.pop(_digest(key), None)
        if name is not None:
            log.info("revoked agent %s's key", name)

    def names(self) -> set[str]:
        """The agents holding a key now: their names need it."""
        with self._lock:
            return set(self._agents.values())

    def caller(self, key: str | None) -> Caller:
        if not key:
            return Caller(NO_KEY)
        if hmac.compare_digest(key.encode(), self.panel_key.encode()):
            return Caller(PANEL)
        with self._lock:
            name = self._agents.get(_digest(key))
        return Caller(AGENT, name) if name is not None else Caller(UNKNOWN)


# -- what each agent's requests are doing ------------------------------------------------------

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


class InflightAgents:
    """Requests each agent has open over HTTP right now: the panel's "connected agents"."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()

    def enter(self, agent: str) -> None:
        with self._lock:
            self._open[agent] += 1

    def exit(self, agent: str) -> None:
        with self._lock:
            self._open[agent] -= 1
            if self._open[agent] <= 0:
                del self._open[agent]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._open)


# -- what each request did ---------------------------------------------------------------------

@dataclass(slots=True, frozen=True)
class RequestRecord:
    agent: str
    endpoint: str  # the route's path, e.g. /v1/messages
    status: int  # the HTTP status the client got (200 for a stream that started)
    prompt_tokens: int = 0
    computed_tokens: int = 0  # prompt tokens the engine computed (prompt_tokens - reused, plus any recompute)
    reused_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    output_tokens: int = 0
    finish: str | None = None  # stop, length, tool_calls, abort, error... as the engine ended it
    ttft_s: float | None = None  # seconds from arrival to the first output token
    seconds: float = 0.0  # arrival to the end of the response
    note: str | None = None  # why something was adjusted or failed (a cut max_tokens, an error message)
    ended: float = 0.0  # time.time() when recorded

    def line(self) -> str:
        ttft = "-" if self.ttft_s is None else f"{self.ttft_s:.2f}s"
        text = (f"{self.agent} {self.endpoint} {self.status} prompt={self.prompt_tokens} "
                f"computed={self.computed_tokens} reused={self.reused_tokens} output={self.output_tokens} "
                f"finish={self.finish or '-'} ttft={ttft} time={self.seconds:.2f}s")
        return f"{text} ({self.note})" if self.note else text


class RequestLog:
    """Thread-safe: the HTTP layer records on the event loop, readers poll from anywhere."""

    def __init__(self, max_records: int = MAX_RECORDS) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=max_records)

    def record(self, record: RequestRecord) -> None:
        if not record.ended:
            record = replace(record, ended=time.time())
        with self._lock:
            self._records.append(record)
        if record.status >= 400 or record.finish == "error":
            request_lines.warning("%s", record.line())
        else:
            request_lines.info("%s", record.line())

    def records(self, agent: str | None = None) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self._records if agent is None or r.agent == agent]
