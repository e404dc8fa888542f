"""`--api-key` never stays on a command line, where any process of the machine reads it (a fenced agent too,
under Landlock without a pid namespace): the process execs itself with the key in its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from swarm_panel.app.cli.secret_args import ENV, without_key
from tests.app.server.test_server_common import served_url

KEY = "a-key-only-the-user-knows-7f3a"


@pytest.mark.parametrize(("argv", "kept", "key"), [
    (["serve", "--api-key", KEY, "--port", "0"], ["serve", "--port", "0"], KEY),
    (["-v", "serve", f"--api-key={KEY}"], ["-v", "serve"], KEY),
    (["serve", "--api-k", KEY], ["serve"], KEY),  # argparse's abbreviation
    (["serve", "--api-key", "old", "--api-key", KEY], ["serve"], KEY),  # argparse keeps the last
    (["serve", "--port", "0"], ["serve", "--port", "0"], None),
    (["serve", "--api-key"], ["serve", "--api-key"], None),  # no value: argparse's error, as before
    (["agents", "run", "aider", "--", "--api-key", "x"], ["agents", "run", "aider", "--", "--api-key", "x"], None),
])
def test_the_key_is_taken_out_of_the_arguments(argv, kept, key):
    assert without_key(argv) == (kept, key)


def _tree(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(p for child in children for p in _tree(int(child)))]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_serve_keeps_its_key_off_every_command_line_and_still_checks_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env |= {"SWARM_PANEL_CONFIG_FILE": str(tmp_path / "none.toml"), "SWARM_PANEL_KEYS": str(tmp_path / "keys"),
            "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "swarm_panel", "serve", "--engine", "modeled", "--port", "0",
                             "--api-key", KEY], stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = served_url(proc, 60)
        processes = _tree(proc.pid)
        assert len(processes) >= 2, "no supervised child"
        for pid in processes:
            assert KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), f"the key is on {pid}'s command line"
        switch = {"policy": "fair"}
        assert httpx.put(f"{url}/v1/scheduler", json=switch, timeout=10).status_code == 401
        answer = httpx.put(f"{url}/v1/scheduler", json=switch, timeout=10, headers={"Authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200 and answer.json()["policy"] == "fair"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_command_without_the_flag_still_refuses_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV} | {"SWARM_PANEL_CONFIG_FILE": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, "-m", "swarm_panel", "plan", "--api-key", KEY], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2 and "unrecognized arguments: --api-key" in done.stderr
