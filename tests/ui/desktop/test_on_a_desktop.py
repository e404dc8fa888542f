"""The panel on a desktop of real parts (tests/ui/desktop/desktop_session.py: Xvfb, a private D-Bus session, dunst,
trayer). Launched twice, it is one panel: the second launch gives the first the focus and exits 0 (`--new-instance`
opens a second, its port in its title), and `serve` on its port names it; killed, it leaves no lock that blocks the next start. The tray, notification and close tests, which
skip on a desktop without those parts, run here in a pytest of their own (Qt's platform is chosen once a process)
and must pass without skipping."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ui.desktop.desktop_session import desktop, missing

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(missing()), reason=f"the test desktop needs {missing()}")]
HERE = Path(__file__).parent
ROOT = HERE.parents[2]
WINDOW_S = 90.0


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with desktop(tmp_path_factory.mktemp("desktop")) as env:
        yield env | {"PYTHONPATH": str(ROOT)}


def panel(env, settings: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swarm_panel", "--engine", "modeled", "--settings-file",
                             str(settings), *options], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def xdotool(env, *words: str) -> list[str]:
    return subprocess.run(["xdotool", *words], env=env, capture_output=True, text=True).stdout.split()


def panel_windows(env) -> list[str]:
    return xdotool(env, "search", "--onlyvisible", "--name", "^swarm-panel")


def wait_for_window(env, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + WINDOW_S
    while not panel_windows(env):
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the panel's window did not show"
        time.sleep(0.2)
    return panel_windows(env)[0]


def panel_pid(process: subprocess.Popen) -> int:
    """The panel's own process: `swarm-panel` runs it as the child of a supervisor (app.supervisor)."""
    (child,) = (int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split())
    return child


def quit_panel(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)  # as a session's logout: the panel quits cleanly
    return process.wait(timeout=60)


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def test_the_tray_notification_and_close_tests_pass_here_without_skipping(session):
    tests = [str(HERE / name) for name in ("test_tray.py", "test_notices.py", "test_close_question.py")]
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *tests], env=session,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ""
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "skipped" not in summary and "passed" in summary, ran.stdout[-2000:]


def test_launching_twice_gives_one_panel_unless_asked_and_serve_names_it_on_its_port(session, tmp_path):
    port = free_port()
    settings = tmp_path / "panel.ini"
    first = panel(session, settings, "--port", str(port))
    try:
        window = wait_for_window(session, first)
        second = subprocess.run([sys.executable, "-m", "swarm_panel", "gui", "--settings-file", str(settings)],
                                env=session, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert second.stdout.startswith(f"swarm-panel is already running (pid {panel_pid(first)}, serving "
                                        f"http://127.0.0.1:{port}): its window was brought to the front.")
        assert panel_windows(session) == [window]
        deadline = time.monotonic() + 10
        while xdotool(session, "getwindowfocus") != [window]:
            assert time.monotonic() < deadline, "the running panel did not take the focus"
            time.sleep(0.1)

        on_purpose = panel(session, settings, "--port", str(port), "--new-instance")  # its port is taken: a free one
        try:
            deadline = time.monotonic() + WINDOW_S
            while not (titled := xdotool(session, "search", "--onlyvisible", "--name", "a second instance on port")):
                assert on_purpose.poll() is None and time.monotonic() < deadline, "no second panel showed"
                time.sleep(0.2)
            title = subprocess.run(["xdotool", "getwindowname", titled[0]], env=session, capture_output=True,
                                   text=True).stdout
            assert title.startswith("swarm-panel, a second instance on port ") and f"port {port}:" not in title
        finally:
            assert quit_panel(on_purpose) == 0

        served = subprocess.run([sys.executable, "-m", "swarm_panel", "serve", "--engine", "modeled", "--port",
                                 str(port)], env=session, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert served.returncode == 1
        assert f"port {port} on 127.0.0.1 is already in use by " in served.stderr
        assert "python -m swarm_panel --engine modeled --settings-file" in served.stderr
        assert f"(pid {panel_pid(first)}); stop it or pick another port" in served.stderr
    finally:
        assert quit_panel(first) == 0


def test_a_killed_panel_leaves_a_lock_that_does_not_block_the_next_start(session, tmp_path):
    settings = tmp_path / "panel.ini"
    crashed = panel(session, settings, "--port", "0")
    wait_for_window(session, crashed)
    crashed.kill()
    crashed.wait()
    runtime = Path(session["XDG_RUNTIME_DIR"])
    assert any(path.suffix == ".lock" for path in runtime.iterdir())  # what the crash left
    deadline = time.monotonic() + 10
    while panel_windows(session):  # the X server drops the dead panel's window
        assert time.monotonic() < deadline
        time.sleep(0.1)
    after = panel(session, settings, "--port", "0")
    try:
        wait_for_window(session, after)
    finally:
        assert quit_panel(after) == 0
    assert "already running" not in after.stdout.read()
