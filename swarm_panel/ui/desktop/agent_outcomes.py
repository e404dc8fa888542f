"""Launched coding agents' ends, each told once: finished (exit code 0) with its changed files and +/- lines, or
failed (it did not start, or exited with another code). An agent the user stopped is no news.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from swarm_panel.app.harness.launcher import EXITED, FAILED, HarnessRun
from swarm_panel.app.workspace.changes import Changes

FILES_NAMED = 4
REVIEW, CODING = "review", "coding"  # where a click on the notification leads


@dataclass(frozen=True)
class Outcome:
    kind: str  # a notices kind: agent_finished or agent_failed
    title: str
    body: str
    key: str  # "review:NAME" or "coding:NAME"


class Ends:
    """The runs that ended since the last look, each once."""

    def __init__(self) -> None:
        self._told: set[int] = set()

    def new(self, runs: Iterable[HarnessRun]) -> list[HarnessRun]:
        ended = [run for run in runs if run.finished and id(run) not in self._told]
        self._told.update(id(run) for run in ended)
        return [run for run in ended if run.status in (EXITED, FAILED)]


def finished(run: HarnessRun, found: Changes | None) -> Outcome:
    if found is None:
        body = "Its changes could not be read; Review shows its worktree."
    elif not found.files:
        body = "It changed no file."
    else:
        names = ", ".join(change.path for change in found.files[:FILES_NAMED])
        more = f" and {len(found.files) - FILES_NAMED} more" if len(found.files) > FILES_NAMED else ""
        count = f"{len(found.files)} file{'s' if len(found.files) != 1 else ''}"
        body = f"{count} changed, +{found.added} −{found.removed}: {names}{more}. Click to review."
    return Outcome("agent_finished", f"{run.name} finished", body, f"{REVIEW}:{run.name}")


def failed(run: HarnessRun) -> Outcome:
    if run.status == FAILED:
        why = f"It did not start: {run.error}"
    else:
        complaint = run.stderr.text.strip().splitlines()[-1:] or [""]
        why = f"It exited with code {run.exit_code}" + (f": {complaint[0][:200]}" if complaint[0] else ".")
    return Outcome("agent_failed", f"{run.name} failed", why, f"{CODING}:{run.name}")
