"""A finished API call as the request log's line (app.service.request_log), whatever endpoint it came through."""

from __future__ import annotations

import time

from starlette.requests import Request

from swarm_panel.app.endpoint.agent_paths import agent_from_scope
from swarm_panel.app.endpoint.chat_run import ChatRun
from swarm_panel.app.endpoint.errors import APIError
from swarm_panel.app.service.request_log import RequestLog, RequestRecord

# Set in a request's ASGI scope once its run wrote its line, so the error handler does not write a second.
RECORDED = "swarm_panel.recorded"

# A run that ended without an answer: the engine failed it, or the client hung up (nginx's 499).
STATUS_OF_FINISH = {"error": 500, "abort": 499}


def run_record(run: ChatRun, agent: str, endpoint: str) -> RequestRecord:
    first = run.handles[0]
    reused = min(h.request.num_cached_tokens for h in run.handles)
    finish = first.finish_reason or "abort"
    note = run.note
    if finish == "error" and first.error:
        note = f"{note}; {first.error}" if note else first.error
    return RequestRecord(
        agent=agent, endpoint=endpoint, status=STATUS_OF_FINISH.get(finish, 200),
        prompt_tokens=run.prompt_tokens, computed_tokens=run.prompt_tokens - reused, reused_tokens=reused,
        output_tokens=sum(h.completion_tokens for h in run.handles), finish=finish,
        ttft_s=None if run.first_output_at is None else run.first_output_at - run.started,
        seconds=time.monotonic() - run.started, note=note,
    )


def record_error(log: RequestLog, request: Request, error: APIError) -> None:
    """An API call refused before (or failed after) it ran: its status and message at WARNING. Only the
    API's routes: a client probing `/` (Claude Code sends `HEAD /`) is not a request that stalled."""
    if request.scope.get(RECORDED) or not request.url.path.startswith("/v1/"):
        return
    request.scope[RECORDED] = True
    agent = agent_from_scope(request.scope) or request.headers.get("x-agent-name") or "anonymous"
    log.record(RequestRecord(agent=agent, endpoint=request.url.path, status=error.status, finish="error",
                             note=error.message))
