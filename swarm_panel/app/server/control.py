"""The server's own routes: GET|PUT /v1/scheduler (the scheduler's state and knobs), GET /metrics and
GET /health. Who may use them: app.endpoint.wire (reading needs READ, changing the panel's key).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from swarm_panel.app.endpoint.engine_client import EngineClient
from swarm_panel.app.endpoint.errors import bad_request
from swarm_panel.app.endpoint.prom import CONTENT_TYPE, render
from swarm_panel.app.endpoint.wire import ADMIN, READ, guard, read_json
from swarm_panel.app.settings.fields import field_spec
from swarm_panel.runtime.llama.facts import LlamaFigures
from swarm_panel.runtime.policies.registry import POLICY_NAMES


def _knob(name: str) -> Any:
    spec = field_spec(name)
    return Field(None, ge=spec.ge, le=spec.le)


class SchedulerUpdate(BaseModel):
    """PUT /v1/scheduler: any subset of the knobs; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")

    policy: Literal[POLICY_NAMES] | None = None
    # Bounds as Settings declares them, so the API and every front end refuse the same values.
    num_lanes: int | None = _knob("num_lanes")
    prefill_chunk: int | None = _knob("prefill_chunk")
    kv_budget: int | None = _knob("kv_budget")
    admission_wait_s: float | None = _knob("admission_wait_s")
    prefix_cache: bool | None = None
    # Each replaces the whole map: agents left out go back to weight 1 and priority 0.
    agent_weights: dict[str, float] | None = None
    agent_priorities: dict[str, int] | None = None

    def changes(self) -> dict[str, Any]:
        changes = self.model_dump(exclude_unset=True)
        for key in ("policy", "num_lanes", "prefill_chunk", "admission_wait_s", "prefix_cache", "agent_weights",
                    "agent_priorities"):
            if key in changes and changes[key] is None:
                raise ValueError(f"{key} must not be null")
        return changes


def control_router(server: EngineClient) -> APIRouter:
    service = server.service
    reads = [Depends(guard(service.agent_keys, READ))]
    # Not under the inference routes' guard: an agent's key, good there, is refused here.
    control = APIRouter()

    @control.get("/v1/scheduler", dependencies=reads)
    async def get_scheduler():
        _, thread = server.engine()
        return server.scheduler_state(thread)

    @control.put("/v1/scheduler", dependencies=[Depends(guard(service.agent_keys, ADMIN))])
    async def put_scheduler(request: Request):
        raw = await read_json(request, service.settings.max_body_bytes)
        if not isinstance(raw, dict):
            raise bad_request("the body must be a JSON object of scheduler settings")
        update = SchedulerUpdate.model_validate(raw)
        _, thread = server.engine()
        try:
            thread.reconfigure(**update.changes())
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return server.scheduler_state(thread)

    @control.get("/metrics", dependencies=reads)
    async def metrics():
        return Response(render(server.registry), media_type=CONTENT_TYPE)

    @control.get("/health")
    async def health():
        try:
            engine, thread = service.engine, service.engine_thread
        except RuntimeError:
            return JSONResponse({"status": "unavailable", "error": service.load_error}, status_code=503)
        status = "ok" if thread.alive else "stopped"
        return JSONResponse(
            {"status": status, "model": server.facts(engine).model_id, "engine": engine.name,
             "running": thread.num_running, "waiting": thread.num_waiting, "engine_errors": thread.error_count,
             "steps": thread.snapshot().step, "engine_busy_s": round(thread.busy_s, 3),
             "threads": threads.n_threads if isinstance(threads := engine.figures(), LlamaFigures) else None},
            status_code=200 if thread.alive else 503,
        )

    return control
