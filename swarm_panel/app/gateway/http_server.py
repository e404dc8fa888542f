"""The gateway on a real socket, on the running loop (asyncio.run headless, qasync under the panel)."""

from __future__ import annotations

import asyncio

import uvicorn

from swarm_panel.app.gateway.admission import Gateway
from swarm_panel.app.gateway.asgi import create_gateway_app
from swarm_panel.app.server.http_server import (
    GRACEFUL_SHUTDOWN_S,
    KEEP_ALIVE_S,
    _EmbeddedServer,
    _is_loopback,
    bind_socket,
)
from swarm_panel.app.service import panel_key_file
from swarm_panel.app.settings.schema import Settings


class GatewayServer:
    def __init__(self, settings: Settings, gateway: Gateway | None = None) -> None:
        public = not _is_loopback(settings.host)
        if public and settings.api_key is None and not settings.insecure_public_without_api_key:
            raise ValueError(
                f"refusing to listen on {settings.host} without an API key: anyone on the network could use the "
                f"backends. Set --api-key, or --insecure-public-without-api-key if you mean it"
            )
        self.settings = settings
        self.gateway = gateway or Gateway(settings.backends, policy=settings.gateway_policy,
                                          routing=settings.gateway_routing, max_waiting=settings.max_waiting)
        self.app = create_gateway_app(self.gateway, settings)
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        host = self.settings.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Polls the backends once, then listens; raises PortInUse if the port is taken."""
        sock = bind_socket(self.settings.host, self.settings.port)
        self.port = sock.getsockname()[1]
        await self.gateway.start()
        config = uvicorn.Config(self.app, host=self.settings.host, port=self.port, log_config=None, access_log=False,
                                lifespan="off", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, server_header=False,
                                timeout_keep_alive=KEEP_ALIVE_S)
        server = self._server = _EmbeddedServer(config)
        self._task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]), name="gateway-http")
        while not server.started:
            if self._task.done():
                sock.close()
                self._task.result()
                raise RuntimeError(f"the gateway on {self.url} stopped while starting")
            await asyncio.sleep(0.005)
        keys = self.app.state.keys
        if not keys.user_set:  # the user's own --api-key is theirs to hand out, never written down here
            panel_key_file.write(self.port, keys.generated)

    async def stop(self) -> None:
        server, task = self._server, self._task
        if server is not None and task is not None:
            server.should_exit = True
            await task
        self._server = self._task = None
        if self.port is not None:
            panel_key_file.remove(self.port)
        await self.gateway.stop()
        await self.app.state.forwarder.close()
