"""One line per request: who asked, through which endpoint, what it cost and how it ended.

A user watching a harness stall needs to see its requests: the prompt tokens computed and reused, the
output, the finish, the status and the time to first token. Records are kept in a bounded ring (the
panel and `swarm-panel agents run` read an agent's turns from it) and written to the
`swarm_panel.requests` logger: INFO for answered requests, WARNING with the message for errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace

log = logging.getLogger("swarm_panel.requests")

MAX_RECORDS = 4096


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
            log.warning("%s", record.line())
        else:
            log.info("%s", record.line())

    def records(self, agent: str | None = None) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self._records if agent is None or r.agent == agent]

