"""One panel per user and settings file: a second launch asks the first to raise its window and exits 0, saying so;
a lock left by a crashed panel does not block the next start; another settings file is another panel."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from swarm_panel.ui.desktop.single_instance import Instance, Running, claim, instance_name

SECOND_CLAIM = textwrap.dedent("""
    import sys
    from PySide6 import QtCore
    from swarm_panel.ui.desktop.single_instance import claim
    app = QtCore.QCoreApplication([])
    held = claim(sys.argv[1])
    print(repr(held), flush=True)
    if sys.argv[2:] == ["crash"]:
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
""")


# A panel that took its lock and hangs before it listens.
HOLD_THE_LOCK = textwrap.dedent("""
    import sys, time
    from PySide6 import QtCore
    lock = QtCore.QLockFile(sys.argv[1])
    assert lock.tryLock(0)
    print("held", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def own_runtime_folder(monkeypatch):
    """A short one, as /run/user/UID is: a socket's address must fit 104 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="run-"))
    folder.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def env() -> dict[str, str]:
    return os.environ | {"QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": os.getcwd()}


def run_beside(qtbot, argv: list[str]) -> subprocess.CompletedProcess:
    """A second process, while this one's event loop answers it."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    qtbot.waitUntil(lambda: process.poll() is not None, timeout=60_000)
    out, err = process.communicate()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def test_a_second_claim_finds_the_first_which_is_asked_to_raise_its_window(qtbot, tmp_path, own_runtime_folder):
    settings = str(tmp_path / "panel.ini")
    first = claim(settings)
    assert isinstance(first, Instance)
    first.answer = lambda: "http://127.0.0.1:8123"
    try:
        with qtbot.waitSignal(first.raise_requested, timeout=30_000):
            second = run_beside(qtbot, [sys.executable, "-c", SECOND_CLAIM, settings])
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == repr(Running(os.getpid(), "http://127.0.0.1:8123"))
        other = claim(str(tmp_path / "other.ini"))  # another settings file: another panel
        assert isinstance(other, Instance)
        other.release()
    finally:
        first.release()


def test_the_command_says_the_panel_is_running_and_exits_0(qtbot, tmp_path, own_runtime_folder):
    settings = tmp_path / "panel.ini"
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    first = claim(SettingsStore(settings).file_name)
    first.answer = lambda: "http://127.0.0.1:8123"
    try:
        second = run_beside(qtbot, [sys.executable, "-m", "swarm_panel", "gui", "--settings-file", str(settings)])
    finally:
        first.release()
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(f"swarm-panel is already running (pid {os.getpid()}, serving "
                                    "http://127.0.0.1:8123): its window was brought to the front.")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL to leave a stale lock")
def test_a_lock_left_by_a_killed_panel_does_not_block_the_next_start(qtbot, tmp_path, own_runtime_folder):
    settings = str(tmp_path / "panel.ini")
    crashed = run_beside(qtbot, [sys.executable, "-c", SECOND_CLAIM, settings, "crash"])
    assert crashed.returncode == -signal.SIGKILL and crashed.stdout.startswith("<swarm_panel.ui.desktop")
    left = sorted(path.suffix for path in own_runtime_folder.iterdir())
    assert left == [".lock", ".socket"]  # what the killed panel left behind
    after = claim(settings)
    assert isinstance(after, Instance) and after.server is not None and after.server.isListening()
    after.release()


def test_a_holder_that_does_not_answer_is_named_and_nothing_starts(qtbot, tmp_path, own_runtime_folder):
    settings = str(tmp_path / "panel.ini")
    lock = own_runtime_folder / f"{instance_name(settings)}.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(lock)], stdout=subprocess.PIPE, text=True,
                              env=env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match=rf"another swarm-panel \(pid {holder.pid}\) holds .* but does not "
                                               "answer; --new-instance starts a second panel anyway"):
            claim(settings, starting_ms=300)
    finally:
        holder.kill()
        holder.wait()
