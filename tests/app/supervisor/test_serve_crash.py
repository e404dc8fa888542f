"""`swarm-panel serve` whose engine dies inside native code: the client's request ends with an error at once,
not a hang; serve exits non-zero and says the engine crashed, naming the llama_decode call in flight."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.app.server.test_server_common import served_url

pytestmark = pytest.mark.slow


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the supervised child")
def test_serve_reports_an_engine_crash_and_the_client_gets_an_error(tmp_path):
    env = dict(os.environ, SWARM_PANEL_CONFIG_FILE=str(tmp_path / "none.toml"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "swarm_panel", "serve", "--model", "demo", "--port", "0",
                             "--num-lanes", "2", "--n-ctx", "2048"], stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    try:
        url = served_url(proc, 120, lines)
        (child,) = _children(proc.pid)
        outcome: dict[str, object] = {}

        def ask() -> None:
            try:
                with httpx.stream("POST", f"{url}/v1/completions", timeout=60, json={
                        "prompt": "hello", "max_tokens": 100000, "ignore_eos": True, "stream": True}) as resp:
                    for _ in resp.iter_lines():
                        outcome.setdefault("streaming", True)
                outcome["ended"] = "without an error"
            except httpx.HTTPError as exc:
                outcome["ended"] = type(exc).__name__

        client = threading.Thread(target=ask)
        client.start()
        deadline = time.monotonic() + 60
        while "streaming" not in outcome and time.monotonic() < deadline:
            time.sleep(0.05)
        assert outcome.get("streaming"), "no token streamed"
        os.kill(child, signal.SIGSEGV)
        client.join(timeout=30)
        assert not client.is_alive(), "the client hangs on a dead server"
        assert outcome["ended"] != "without an error"
        assert proc.wait(timeout=30) == 128 + signal.SIGSEGV
        err = "".join(lines) + proc.stderr.read()
        assert "Fatal Python error: Segmentation fault" in err  # faulthandler's stacks
        assert re.search(r"The engine crashed \(SIGSEGV\).*The last step was llama_decode: \d+ tokens, 1 sequences",
                         err), err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
