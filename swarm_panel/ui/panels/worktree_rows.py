"""What the Review dock's worktrees table says of one workspace (its cells, its state, the tooltip with its
files and what review flags in them), and the colours of its diff view."""

from __future__ import annotations

from PySide6 import QtGui

from swarm_panel.app.workspace.changes import Changes, FileChange
from swarm_panel.app.workspace.records import COPY, Workspace
from swarm_panel.ui.toolkit import theme

HEADERS = ("agent", "state", "files", "+", "−", "flagged", "branch", "from")
FLAGGED = HEADERS.index("flagged")
HEADER_TIPS = {"files": "files changed against the commit it started from: its snapshot once it ended",
               "+": "lines added", "−": "lines removed",
               "flagged": "what a line count hides: links (one out of the tree is refused at Apply), mode changes, "
                          "submodules, .gitattributes, files that run on their own (CI, hooks, .envrc); the "
                          "row's tooltip names them",
               "from": "the branch Apply merges it into"}
MOVED_ON = "moved on"  # its tree changed after its snapshot: Apply refuses it
NOT_FINAL = "not final"  # it ended with no snapshot yet: selecting it (its diff) takes one
STATE_COLOURS = {"running": theme.USEFUL, "applied": theme.MINT, "tree missing": theme.QUEUE, MOVED_ON: theme.QUEUE,
                 NOT_FINAL: theme.USEFUL}


def state_of(state: str, found: Changes | None) -> str:
    """Its state, where its changes say more: a tree moved on, or one that ended with no snapshot read."""
    if found is not None and found.moved_on:
        return MOVED_ON
    return NOT_FINAL if found is not None and not found.final and state == "kept" else state


def cells(ws: Workspace, state: str, found: Changes | None) -> tuple[str, ...]:
    if found is None:
        counts = ("–", "–", "–", "–")
    else:
        counts = (str(len(found.files)), f"+{found.added}", f"−{found.removed}",
                  f"⚑ {len(found.flagged)}" if found.flagged else "")
    return (ws.name, state_of(state, found), *counts, ws.branch, ws.target + (" (a copy)" if ws.mode == COPY else ""))


def _line(change: FileChange) -> str:
    lines = (f"+{change.added if change.added is not None else '?'} "
             f"−{change.removed if change.removed is not None else '?'}")
    flags = f"  ⚑ {', '.join(change.flags)}" if change.flags else ""
    return f"{change.status} {change.shown()} {lines}{flags}"


def tooltip(ws: Workspace, found: Changes | None) -> str:
    if found is None:
        return ws.folder
    note = ("Its tree changed after its snapshot: Apply refuses it.\n" if found.moved_on else
            "Its live tree, not final.\n" if not found.final else "")
    return note + ("\n".join(_line(c) for c in found.files) or "no changes")


class DiffHighlighter(QtGui.QSyntaxHighlighter):
    """Added lines mint, removed ones red, hunks gold; the header's flagged files red, its other lines gold."""

    def highlightBlock(self, text: str) -> None:
        colour = (theme.QUEUE if text.startswith("# flagged") else
                  theme.USEFUL if text.startswith("# ") else
                  theme.MINT if text.startswith("+") and not text.startswith("+++") else
                  theme.QUEUE if text.startswith("-") and not text.startswith("---") else
                  theme.USEFUL if text.startswith("@@") else None)
        if colour is not None:
            fmt = QtGui.QTextCharFormat()
            fmt.setForeground(QtGui.QColor(colour))
            self.setFormat(0, len(text), fmt)
