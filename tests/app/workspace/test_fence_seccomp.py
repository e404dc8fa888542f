"""The seccomp filter that refuses the harness Unix sockets cannot be made on a machine it has no system
call numbers for: then nothing runs (exit 126, the reason on stderr), neither through its own step (inside
bubblewrap) nor through landlock_exec. What it refuses and allows is tested through the real launcher:
tests/app/hostile/test_fence_unix_sockets.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swarm_panel.app.fence import landlock

ELSEWHERE = (
    "import platform, sys\n"
    "platform.machine = lambda: 'ppc64le'\n"
    "from swarm_panel.app.fence import {module}\n"
    "sys.exit({module}.main({args!r}))\n"
)


def run_elsewhere(module: str, args: list[str]) -> subprocess.CompletedProcess:
    code = ELSEWHERE.format(module=module, args=args)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)


def test_the_filters_step_runs_nothing_where_it_has_no_filter(tmp_path):
    made = tmp_path / "ran"
    done = run_elsewhere("seccomp", ["--", "touch", str(made)])
    assert done.returncode == 126 and not made.exists()
    assert "no seccomp filter for this machine's architecture (ppc64le)" in done.stderr


@pytest.mark.skipif(bool(landlock.probe()), reason=landlock.probe() or "Landlock works")
def test_landlock_exec_runs_nothing_where_it_has_no_filter(tmp_path):
    made = tmp_path / "ran"
    done = run_elsewhere("landlock_exec", ["--read", "/proc", "--write", str(tmp_path), "--", "touch", str(made)])
    assert done.returncode == 126 and not made.exists()
    assert "the fence could not be made: no seccomp filter for this machine's architecture" in done.stderr
