"""Real processes for the gateway's end-to-end tests: `swarm-panel serve` backends and the gateway itself.

Every process is started on a free loopback port, waited for by its /health (bounded), and killed
by its own pid when the test ends, whatever happened.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

START_TIMEOUT_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return dict(os.environ, SWARM_PANEL_CONFIG_FILE=str(tmp / "absent.toml"), PYTHONUNBUFFERED="1",
                QT_QPA_PLATFORM="offscreen", **(extra or {}))


class Proc:
    def __init__(self, args: list[str], tmp: Path, name: str, env: dict[str, str] | None = None) -> None:
        self.log = tmp / f"{name}.log"
        self._log = self.log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "swarm_panel.app.cli.main", *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=_env(tmp, env))

    def text(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def wait_healthy(url: str, proc: Proc) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{url} exited early:\n{proc.text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy in {START_TIMEOUT_S} s:\n{proc.text()[-3000:]}")


@contextmanager
def backend(model: Path, tmp: Path, name: str, num_lanes: int = 4, *extra: str):
    port = free_port()
    # The first load's probes (a child process, then timed decode steps on one thread) can take most of
    # the health deadline on a busy machine; these tests are about the gateway, so the kernel is given.
    proc = Proc(["serve", "--engine", "llama", "--model", str(model), "--port", str(port), "--threads", "1",
                 "--num-lanes", str(num_lanes), "--n-ctx", "8192", "--flash-attn", "on", "--extra-buffers", "off",
                 *extra], tmp, name)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        proc.kill()


@contextmanager
def gateway(backends: list[str], tmp: Path, *extra: str):
    args = ["gateway", "--port", "0"]
    for url in backends:
        args += ["--backend", url]
    proc = Proc([*args, *extra], tmp, "gateway")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = None
        while url is None:
            match = re.search(r"gateway on (http://\S+)/v1", proc.text())
            url = match.group(1) if match else None
            if url is None:
                if proc.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not start:\n{proc.text()[-3000:]}")
                time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()


@contextmanager
def fleet(model: Path, tmp: Path, n: int = 2, num_lanes: int = 4):
    """n backends and a gateway in front: yields (gateway url, [(backend url, proc)], gateway proc)."""
    with ExitStack() as stack:
        backends = [stack.enter_context(backend(model, tmp, f"backend{i}", num_lanes)) for i in range(n)]
        url, proc = stack.enter_context(gateway([u for u, _ in backends], tmp))
        yield url, backends, proc
