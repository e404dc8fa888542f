"""The panel's fleet mode: its own endpoint served through the gateway in front of remote backends, and
their plots in the centre column in place of the embedded engine's.

The gateway runs on the panel's asyncio loop (qasync), beside the endpoint, and the endpoint changes
app between requests: agents keep their base URL and only see another engine answer. The poller
never blocks the loop, so a backend that is down shows as such and costs the panel nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.gateway.admission import Gateway
from swarm_panel.app.gateway.asgi import create_gateway_app
from swarm_panel.app.server.http_server import HttpServer
from swarm_panel.app.service.agents import AgentKeys
from swarm_panel.app.settings.backends import BackendConfig
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.serving.metrics import AgentFigures
from swarm_panel.ui.fleet.fleet_panel import FleetPanel, fleet_values
from swarm_panel.ui.panels.agents_table import AgentRow, agent_rows

log = logging.getLogger(__name__)

EMBEDDED_ONLY_TIP = ("Not while the fleet serves: the remote backends run their own schedulers, batch continuously "
                     "and cannot switch policy here. The gateway's admission order and routing are above the "
                     "fleet plots (or PUT /v1/scheduler).")
NOT_MEASURED_TIP = "The remote backends do not report padding, utilization or a step-time ceiling."
_SAVED_TIP = "tipOutsideFleet"
# How long answers under way may finish after the fleet is switched off, before their upstream closes.
DRAIN_S = 3.0


def embedded_only(widgets: list[QtWidgets.QWidget], fleet_active: bool) -> None:
    """Greys out what drives the embedded engine while the fleet serves, the tooltip saying why."""
    for widget in widgets:
        if fleet_active and widget.property(_SAVED_TIP) is None:
            widget.setProperty(_SAVED_TIP, widget.toolTip())
            widget.setToolTip(EMBEDDED_ONLY_TIP)
        elif not fleet_active and widget.property(_SAVED_TIP) is not None:
            widget.setToolTip(widget.property(_SAVED_TIP))
            widget.setProperty(_SAVED_TIP, None)
        widget.setEnabled(not fleet_active)


class FleetMode(QtCore.QObject):
    """`start(backends)` puts the gateway on the endpoint and its plots on `stack`; `stop()` undoes both."""

    def __init__(self, stack: QtWidgets.QStackedWidget, settings: Callable[[], Settings],
                 keys: AgentKeys | None = None) -> None:
        super().__init__(stack)
        self.stack = stack
        self._settings = settings
        self._keys = keys  # the service's: agents launched from the panel keep their keys through the gateway
        self.http: HttpServer | None = None
        self.gateway: Gateway | None = None
        self.panel: FleetPanel | None = None
        self._app = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def active(self) -> bool:
        return self.gateway is not None

    def attach(self, http: HttpServer | None) -> None:
        """The endpoint to serve the fleet on; the app may start the fleet before its endpoint listens."""
        self.http = http
        if http is not None and self._app is not None:
            http.serve(self._app)

    def begin(self, backends: list[BackendConfig], done: Callable[[str | None], None]) -> None:
        """Starts the fleet on the running loop; calls `done` with None once it serves, else the error."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            done("the fleet runs on the panel's event loop; open it with swarm-panel gui")
            return
        self._keep(loop.create_task(self._begin(backends, done), name="fleet-start"))

    async def _begin(self, backends: list[BackendConfig], done: Callable[[str | None], None]) -> None:
        try:
            await self.start(backends)
        except Exception as exc:  # noqa: BLE001 - a list the gateway refuses is a message, never a crash
            log.warning("could not start the fleet: %s", exc)
            done(str(exc) or type(exc).__name__)
        else:
            done(None)

    def _keep(self, task: asyncio.Task) -> None:
        self._tasks.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._tasks.discard)

    async def start(self, backends: list[BackendConfig]) -> None:
        """Raises ValueError on a list the gateway refuses; backends that are down are no error."""
        self.stop()
        settings = self._settings()
        gateway = Gateway(backends, policy=settings.gateway_policy, routing=settings.gateway_routing,
                          max_waiting=settings.max_waiting)
        app = create_gateway_app(gateway, self._settings, self._keys)
        await gateway.start()  # one bounded poll, so the first requests know which backends are up
        self.gateway, self._app = gateway, app
        if self.http is not None:
            self.http.serve(app)
        panel = self.panel = FleetPanel(gateway.backends, gateway.set_policy, gateway.set_routing)
        panel.admission_choice.setCurrentText(gateway.policy.name)
        panel.routing_choice.setCurrentText(gateway.router.name)
        self.stack.addWidget(panel)
        self.stack.setCurrentWidget(panel)
        panel.refresh()
        log.info("the endpoint serves through the gateway in front of %s",
                 ", ".join(b.label for b in gateway.backends))

    def stop(self) -> None:
        """Gives the endpoint back to the embedded engine at once; the gateway closes in the background."""
        gateway, app, panel = self.gateway, self._app, self.panel
        if gateway is None:
            return
        self.gateway = self._app = self.panel = None
        if self.http is not None:
            self.http.serve(None)
        if panel is not None:
            panel.timer.stop()
            self.stack.removeWidget(panel)
            panel.deleteLater()
        self.stack.setCurrentIndex(0)
        self._keep(asyncio.get_event_loop().create_task(self._close(gateway, app), name="fleet-close"))

    @staticmethod
    async def _close(gateway: Gateway, app) -> None:
        await gateway.stop()  # fails what still waits in its queues
        # Closing the forwarder under a live stream would blame its backend (marked down, a failure counted).
        deadline = time.monotonic() + DRAIN_S
        while any(b.inflight for b in gateway.backends) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await app.state.forwarder.close()

    async def close(self) -> None:
        """Stops the fleet and waits until its gateway has closed (the app awaits this before its loop ends)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)  # a start under way, too
        self.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def kpis(self) -> dict[str, float]:
        """The KPI strip's figures the fleet has: total tok/s, occupancy, and everything waiting."""
        gateway = self.gateway
        if gateway is None:
            return {}
        totals = fleet_values([b.history[-1] for b in gateway.backends if b.history])
        waiting = totals["waiting"]
        return {"tok_s": totals["tok_s"], "occupancy": totals["occupancy"],
                "queue": gateway.num_waiting + (0.0 if math.isnan(waiting) else waiting)}

    def policy_caption(self) -> str:
        return f"gateway admission: {self.gateway.policy.label}" if self.gateway is not None else ""

    def agent_rows(self) -> list[AgentRow]:
        """The endpoint table's rows from the gateway: each agent's requests, open ones and backend."""
        gateway = self.gateway
        if gateway is None:
            return []
        figures = [AgentFigures(agent, requests=n) for agent, n in gateway.agent_requests.items()]
        where = {agent: f"on {gateway.agent_backend[agent]}" for agent in gateway.agent_inflight
                 if agent in gateway.agent_backend}
        return agent_rows(figures, dict(gateway.agent_inflight), where)

    def summary(self) -> str:
        """One line for the status bar, where the embedded engine's step figures would be."""
        gateway = self.gateway
        if gateway is None:
            return ""
        up = sum(1 for b in gateway.backends if b.up)
        return (f"fleet: {up} of {len(gateway.backends)} backends up, {gateway.num_waiting} requests waiting in the "
                f"gateway, routing {gateway.router.name}, {gateway.router.moves} agent moves")
