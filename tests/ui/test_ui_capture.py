"""The scripted capture, end to end: window, HTTP server on the qasync loop, built-in swarm, PNG, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def test_scripted_capture_writes_the_png_and_exits_cleanly(tmp_path):
    shot = tmp_path / "shot.png"
    env = os.environ | {"QT_QPA_PLATFORM": "offscreen", "SWARM_PANEL_CONFIG_FILE": str(tmp_path / "absent.toml")}
    result = subprocess.run(
        [sys.executable, "-m", "swarm_panel.ui.shell.cli", "gui", "--engine", "modeled", "--swarm", "8", "--port", "0",
         "--policy", "naive", "--switch", "continuous@2.5", "--screenshot", str(shot), "--quit-after", "4",
         "--settings-file", str(tmp_path / "panel.ini")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    noise = [line for line in result.stderr.splitlines() if "Traceback" in line or "ERROR" in line]
    assert not noise, result.stderr[-3000:]


def test_run_gui_closes_the_engine_and_the_server(tmp_path, monkeypatch):
    """In-process: after run_gui returns no engine thread or server task is left behind."""
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    from swarm_panel.ui.shell.app_main import run_gui

    before = {t.ident for t in threading.enumerate()}
    assert run_gui(engine="modeled", port=0, swarm=4, quit_after=1.5, settings_file=tmp_path / "p.ini") == 0
    left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not [t for t in left if t.name in ("swarm-engine", "swarm-http-loop")], left
