"""A user's git repository for the worktree tests (and the screenshot that shows them): files committed on main."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(folder: Path, files: dict[str, str]) -> Path:
    """`folder`, made a repository whose one commit on main holds `files` (path: text)."""
    folder.mkdir(parents=True)
    sh(folder, "init", "-q", "-b", "main")
    sh(folder, "config", "user.email", "user@example.com")
    sh(folder, "config", "user.name", "User")
    for path, text in files.items():
        (folder / path).write_text(text)
    sh(folder, "add", "-A")
    sh(folder, "commit", "-qm", "start")
    return folder
