"""The Responses API's error shape. An error answered whole is OpenAI's envelope (app.openai_api.errors, the
fallback of every app, so its routes need no shape of their own); a stream that fails after its 200 ends with
`response.failed`, its closing event, whose error carries a code rather than a type.
"""

from __future__ import annotations

import time
import uuid

from swarm_panel.app.endpoint.wire import sse

# Who is at fault, by status: the client (4xx: invalid_prompt, or a specific code) or this server or one behind
# it (5xx: server_error). tests/faults/test_error_types.py walks every status the code emits.
_CODES = {429: "rate_limit_exceeded"}


def failure_code(status: int) -> str:
    return _CODES.get(status, "server_error" if status >= 500 else "invalid_prompt")


def stream_end(status: int, message: str, *, response_id: str | None = None, sequence_number: int = 0,
               model: str = "") -> bytes:
    """How a Responses stream already answered 200 ends when it fails (`status` says who failed):
    `response.failed`, with the response's id and the stream's next sequence number where known."""
    response = {"id": response_id or f"resp_{uuid.uuid4().hex}", "object": "response",
                "created_at": int(time.time()), "status": "failed", "model": model, "output": [],
                "error": {"code": failure_code(status), "message": message}, "incomplete_details": None}
    return sse({"type": "response.failed", "sequence_number": sequence_number, "response": response},
               "response.failed")
