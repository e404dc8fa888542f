"""What an agent changed against its base: files with +/- lines, modes, links and flags, and the whole diff.

Compared is its snapshot (app.workspace.snapshot), or its live tree while it runs. Both are tree objects
compared with the base by git's plumbing in the workspace's own git folder (app.workspace.reader), with no
work tree: no attribute, textconv or external diff of the agent's applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm_panel.app.workspace.flags import LINK, flags
from swarm_panel.app.workspace.reader import run
from swarm_panel.app.workspace.records import Workspace
from swarm_panel.app.workspace.snapshot import View, view

STATUS_WORDS = {"A": "added", "D": "deleted", "M": "modified", "T": "type changed"}
ABSENT = "000000"  # the mode git gives the side a file is missing from
PLUMBING = ("-r", "-z", "--no-renames", "--no-ext-diff", "--no-textconv")


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    status: str  # added, deleted, modified, type changed
    added: int | None  # lines; None for a binary file
    removed: int | None
    old_mode: str = ""  # "100644", "100755", "120000" (a link), "160000" (a submodule); "" where absent
    new_mode: str = ""
    blob: str = ""  # its object in the change ("" where deleted); old_blob: at the base
    old_blob: str = ""
    link: str | None = None  # where a link points
    flags: tuple[str, ...] = ()

    def shown(self) -> str:
        """Its path, with where a link points: `link -> target`."""
        return self.path if self.link is None else f"{self.path} -> {self.link}"


@dataclass(frozen=True, slots=True)
class Changes:
    files: tuple[FileChange, ...]
    final: bool = True  # its snapshot, taken when it ended; False: its live tree, still changing
    moved_on: bool = False  # its tree changed after the snapshot: Apply refuses it

    @property
    def added(self) -> int:
        return sum(f.added or 0 for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed or 0 for f in self.files)

    @property
    def flagged(self) -> tuple[FileChange, ...]:
        return tuple(f for f in self.files if f.flags)

    def summary(self) -> str:
        flagged = f", {len(self.flagged)} flagged" if self.flagged else ""
        return f"{len(self.files)} file{'s' * (len(self.files) != 1)} +{self.added} -{self.removed}{flagged}"


def compare(ws: Workspace, rev: str) -> tuple[FileChange, ...]:
    """The files that differ between its base and `rev` (a commit or a tree)."""
    numstat = run(ws, "diff-tree", *PLUMBING, "--numstat", ws.base, rev).stdout
    lines: dict[str, tuple[int | None, int | None]] = {}
    for entry in numstat.split("\0"):
        if entry:
            added, removed, path = entry.split("\t", 2)
            lines[path] = (None if added == "-" else int(added), None if removed == "-" else int(removed))
    fields = run(ws, "diff-tree", *PLUMBING, "--raw", "--no-abbrev", ws.base, rev).stdout.split("\0")
    files = []
    for meta, path in zip(fields[0:-1:2], fields[1::2], strict=True):
        old_mode, new_mode, old_blob, blob, status = meta.lstrip(":").split(" ")
        old_mode, new_mode = ("" if m == ABSENT else m for m in (old_mode, new_mode))
        link = _text(ws, blob) if new_mode == LINK else None
        added, removed = lines.get(path, (None, None))
        files.append(FileChange(path, STATUS_WORDS.get(status[:1], status), added, removed, old_mode, new_mode,
                                "" if not new_mode else blob, "" if not old_mode else old_blob, link,
                                flags(path, old_mode, new_mode, link)))
    return tuple(files)


def _text(ws: Workspace, blob: str) -> str:
    return run(ws, "cat-file", "blob", blob, text=False).stdout.decode(errors="replace")


def changes(ws: Workspace) -> Changes:
    """Its files changed against its base: its snapshot once it ended, else its live tree."""
    seen = view(ws)
    return Changes(compare(ws, seen.rev), final=seen.final, moved_on=seen.moved_on)


def header(ws: Workspace, seen: View, files: tuple[FileChange, ...]) -> str:
    """What a diff is of, and its flagged files, as `#` lines above it (patch skips them)."""
    lines = [f"# {seen.note(ws.name)}"]
    lines += [f"# flagged: {f.shown()}: {', '.join(f.flags)}" for f in files if f.flags]
    return "\n".join(lines) + "\n"


def diff_text(ws: Workspace) -> str:
    """Its unified diff under a header naming what it is of and its flagged files. An agent that ended with no
    snapshot taken gets one now: what is read here is what Apply lands."""
    seen = view(ws, take_missing=True)
    files = compare(ws, seen.rev)
    body = run(ws, "diff-tree", *PLUMBING, "-p", "--no-color", "--submodule=short", ws.base, seen.rev).stdout
    return header(ws, seen, files) + body
