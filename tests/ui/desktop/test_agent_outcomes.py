"""Launched agents' ends, each told once: finished with its files and +/- lines (a click opens Review on it), failed
with its exit code and last complaint or why it did not start (a click opens Coding agents); a stop is no news."""

from __future__ import annotations

from pathlib import Path

from swarm_panel.app.harness.kinds import KINDS
from swarm_panel.app.harness.launcher import EXITED, FAILED, RUNNING, STOPPED, HarnessRun
from swarm_panel.app.workspace.changes import Changes, FileChange
from swarm_panel.ui.desktop.agent_outcomes import Ends, failed, finished


def run(name: str, status: str, exit_code: int | None = None) -> HarnessRun:
    return HarnessRun(KINDS["codex"], name, Path("/tmp"), "a task", status=status, exit_code=exit_code)


def test_each_end_is_told_once_and_a_stop_is_not():
    ended = [run("codex-1", EXITED, 0), run("codex-2", STOPPED, -15), run("codex-3", FAILED), run("codex-4", RUNNING)]
    ends = Ends()
    assert [r.name for r in ends.new(ended)] == ["codex-1", "codex-3"]
    assert ends.new(ended) == []
    ended[3].status, ended[3].exit_code = EXITED, 3
    assert [r.name for r in ends.new(ended)] == ["codex-4"]


def test_what_a_finished_and_a_failed_agent_say():
    files = tuple(FileChange(f"f{n}.py", "modified", n, 1) for n in range(1, 7))
    told = finished(run("codex-1", EXITED, 0), Changes(files))
    assert told.kind == "agent_finished" and told.title == "codex-1 finished" and told.key == "review:codex-1"
    assert told.body == "6 files changed, +21 −6: f1.py, f2.py, f3.py, f4.py and 2 more. Click to review."
    assert finished(run("codex-1", EXITED, 0), Changes(())).body == "It changed no file."

    crashed = run("codex-2", EXITED, 3)
    crashed.stderr.add(b"starting\ncodex: the model refused\n")
    told = failed(crashed)
    assert (told.kind, told.title, told.key) == ("agent_failed", "codex-2 failed", "coding:codex-2")
    assert told.body == "It exited with code 3: codex: the model refused"
    unstarted = run("codex-3", FAILED)
    unstarted.error = "no such file: codex"
    assert failed(unstarted).body == "It did not start: no such file: codex"
