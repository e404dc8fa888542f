"""git through subprocess: one call, its output, and a WorkspaceError with git's own words when it fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# git must never stop to ask (an editor, a pager, a credential prompt): nobody is at its terminal.
QUIET = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "GIT_PAGER": "cat", "LC_ALL": "C"}
AGENT_IDENTITY = ("-c", "user.name=swarm-panel", "-c", "user.email=swarm-panel@localhost", "-c", "commit.gpgsign=false")


class WorkspaceError(ValueError):
    """A workspace cannot be made, applied or discarded; the message says why and what to do."""


class NameTaken(WorkspaceError):
    """The agent's branch or record already exists: the launcher tries the next number."""


def git(cwd: Path | str, *args: str, env: dict[str, str] | None = None, check: bool = True,
        text: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=text, check=False,
                              stdin=subprocess.DEVNULL, env=os.environ | QUIET | (env or {}))
    except FileNotFoundError as exc:
        raise WorkspaceError("git is not installed: agents' worktrees need it") from exc
    if check and done.returncode != 0:
        stderr = done.stderr if text else done.stderr.decode(errors="replace")
        raise WorkspaceError(f"git {' '.join(args[:2])} failed in {cwd}: {stderr.strip() or done.returncode}")
    return done


def out(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> str:
    return git(cwd, *args, env=env).stdout.strip()


def ok(cwd: Path | str, *args: str) -> bool:
    return git(cwd, *args, check=False).returncode == 0


def changed_paths(cwd: Path | str, *, untracked: bool) -> list[str]:
    """The paths `git status` lists as changed (a rename: both names), untracked ones too if asked."""
    entries = git(cwd, "status", "--porcelain", "-z", f"--untracked-files={'all' if untracked else 'no'}").stdout
    paths, fields = [], iter(entries.split("\0"))
    for entry in fields:
        if entry:
            paths.append(entry[3:])
            if entry[0] in "RC":  # the name it had follows
                paths.append(next(fields, ""))
    return paths
