"""The server's app: `create_app(service)` builds a FastAPI app around one SwarmService from each API's router.

Routes: OpenAI's (app.openai_api.routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models),
the Responses API's (app.responses_api.routes: POST /v1/responses), Anthropic's (app.anthropic_api.routes:
POST /v1/messages and /v1/messages/count_tokens), and the server's own (app.server.control: GET|PUT
/v1/scheduler, GET /metrics, GET /health). No state lives at module level: two apps in one process share
nothing. Who may use which route: app.endpoint.wire (a launched agent's key: inference only; PUT
/v1/scheduler: the panel's key only). Errors leave in the route's API shape (app.endpoint.errors): OpenAI's,
unless the API's folder names its own.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from swarm_panel.app.anthropic_api.errors import MESSAGES_PREFIX, AnthropicRoute
from swarm_panel.app.anthropic_api.routes import anthropic_router
from swarm_panel.app.endpoint.chat_run import record_error
from swarm_panel.app.endpoint.engine_client import EngineClient
from swarm_panel.app.endpoint.errors import install_error_handlers
from swarm_panel.app.endpoint.wire import INFERENCE, AgentPaths, guard
from swarm_panel.app.openai_api.errors import OpenAIRoute
from swarm_panel.app.openai_api.routes import openai_router
from swarm_panel.app.responses_api.routes import responses_router
from swarm_panel.app.responses_api.store import ResponseStore
from swarm_panel.app.server.control import control_router
from swarm_panel.app.service.engine_service import SwarmService


def create_app(service: SwarmService) -> FastAPI:
    """The FastAPI app for one service; the caller starts and stops the service itself."""
    server = EngineClient(service, ResponseStore())
    app = FastAPI(title="swarm-panel", summary="OpenAI- and Anthropic-compatible endpoint of a continuous-batching runtime",
                  version="0.1.0")
    app.state.server = server
    install_error_handlers(app, OpenAIRoute.error_json, {MESSAGES_PREFIX: AnthropicRoute.error_json},
                           on_error=lambda request, error: record_error(service.requests, request, error))
    app.add_middleware(AgentPaths)
    if service.settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=service.settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])
    guarded = [Depends(guard(service.agent_keys, INFERENCE))]
    app.include_router(openai_router(server), prefix="/v1", dependencies=guarded)
    app.include_router(control_router(server))
    app.include_router(responses_router(server), prefix="/v1", dependencies=guarded)
    app.include_router(anthropic_router(server), prefix="/v1", dependencies=guarded)
    return app
