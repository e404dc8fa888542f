"""Shared pieces of the server tests (this module holds no tests itself)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.app.service import panel_key_file
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B, CardProfile

# The article's card at a twentieth of the cost, so real-time tests take moments.
FAST_CARD = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 1.0, "per_row_ms": 0.1})


def settings(**overrides) -> Settings:
    values = {"engine": "modeled", "host": "127.0.0.1", "port": 0, "num_lanes": 8} | overrides
    if values["engine"] == "llama":
        # One attention kernel, named. With "auto" on a CPU the kernel follows the contexts served
        # (runtime.llama.cpu_tuning.followers), and a switch drops every sequence by design, cached and
        # parked ones too, whenever this CPU's probe timings say it pays: a test of reuse would then pass
        # or fail by the CPU it runs on. The switch has tests of its own (test_attention_follower).
        values.setdefault("flash_attn", "off")
    return Settings(**values)


def modeled_service(card: CardProfile = FAST_CARD, engine_class: type[ModeledEngine] = ModeledEngine,
                    **overrides) -> SwarmService:
    return SwarmService(settings(**overrides),
                        engine_factory=lambda s: engine_class(card, realtime=True, max_lanes=256))


@contextmanager
def running(service: SwarmService) -> Iterator[ThreadedHttpServer]:
    service.start()
    server = ThreadedHttpServer(service)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        service.stop()


def panel(server) -> dict[str, str]:
    """The header that steers the server (PUT /v1/scheduler): the panel's key, as a CLI here reads it."""
    key = panel_key_file.read(server.url)
    assert key, f"the server at {server.url} published no key"
    return {"Authorization": f"Bearer {key}"}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def assert_error(response, status: int, *, param: str | None = None, code: str | None = None,
                 contains: str | None = None) -> dict:
    """The response is an OpenAI-shaped error with this status (and param/code/message text if given)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    if contains is not None:
        assert contains in error["message"], error
    return error


def idle(service: SwarmService) -> bool:
    thread = service.engine_thread
    return (all(lane.state == "idle" for lane in thread.lanes()) and thread.num_waiting == 0
            and thread.scheduler.kv_used == 0)


def served_url(proc: subprocess.Popen, seconds: float, lines: list[str] | None = None) -> str:
    """The base URL a `swarm-panel serve` process prints on its stderr; what it read is kept in `lines`."""
    lines = [] if lines is None else lines
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "serve exited early: " + "".join(lines)
        lines.append(line)
        match = re.search(r"on (http://\S+)/v1", line)
        if match:
            return match.group(1)
    raise AssertionError("serve printed no URL: " + "".join(lines))
