"""The engine's state as the desktop shows it: the tray's mark and tooltip, and a notification when it changes.

Read from the service at each poll. Crashed is an engine thread that ended while the service still holds it, or an
engine that did not load; a failed step (its requests fail, the thread goes on) is news but no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm_panel.app.service.engine_service import SwarmService

LOADING, SERVING, STOPPED, CRASHED = "loading", "serving", "stopped", "crashed"


@dataclass(frozen=True)
class Reading:
    state: str
    detail: str  # what it serves, or why it crashed
    thread: int = 0  # the engine thread's identity: its failed steps are counted per thread
    failed_steps: int = 0


@dataclass(frozen=True)
class Notice:
    title: str
    body: str


def read(service: SwarmService, loading: bool, fleet: bool) -> Reading:
    if loading:
        return Reading(LOADING, "loading the engine")
    if fleet:
        return Reading(SERVING, "serving through the gateway to the fleet")
    try:
        thread = service.engine_thread
    except RuntimeError:
        if service.load_error:
            return Reading(CRASHED, f"it did not load: {service.load_error}")
        return Reading(STOPPED, "no engine is loaded")
    if not thread.alive:
        return Reading(CRASHED, "its thread ended; the log says why", id(thread), thread.error_count)
    return Reading(SERVING, f"serving {service.engine.name}", id(thread), thread.error_count)


class EngineWatch:
    """Each reading against the last: what changed that the user would want told."""

    def __init__(self) -> None:
        self.last: Reading | None = None

    def update(self, now: Reading) -> list[Notice]:
        before, self.last = self.last, now
        if before is None:
            return []
        notices = []
        if now.state == CRASHED and before.state != CRASHED:
            notices.append(Notice("The engine crashed", f"It {now.detail.removeprefix('it ')}. Agents' requests "
                                  "fail until it is loaded again (the Engine box)."))
        elif now.state == STOPPED and before.state == SERVING:
            notices.append(Notice("The engine stopped", "Agents' requests fail until an engine is loaded again."))
        if now.state == SERVING and now.thread == before.thread and now.failed_steps > before.failed_steps:
            notices.append(Notice("The engine failed a step", "The requests in flight failed and the engine went on; "
                                  "agents retry them. The log says why."))
        return notices
