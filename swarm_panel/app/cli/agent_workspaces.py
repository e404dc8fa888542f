"""`swarm-panel agents diff|apply|discard`, and the kept workspaces under `agents list`.

Each launched agent works in its own workspace (a git worktree on the branch swarm-panel/NAME, or a copy of a
folder that is no repository), kept under the data folder until it is applied or discarded, whatever happened
to the process that launched it. Review is of the snapshot taken when the agent ended (its live tree while
it runs, said to be not final), read as data: nothing the agent wrote into its tree runs (app.workspace).
"""

from __future__ import annotations

import argparse
import sys

from swarm_panel.app.workspace.changes import Changes, changes, diff_text
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.land import apply, discard
from swarm_panel.app.workspace.records import COPY, all_workspaces, default_root, find


def register(verbs: argparse._SubParsersAction) -> None:
    diff = verbs.add_parser("diff", help="what a launched agent changed against its base, as a unified diff under "
                                         "a # header: its snapshot (what apply lands) and the files review flags")
    diff.add_argument("name", metavar="NAME", help="the agent, as `agents list` names it")
    diff.add_argument("--stat", action="store_true", help="only its files with lines added and removed")
    diff.set_defaults(run=run_diff)
    land = verbs.add_parser("apply", help="merge an agent's snapshot into your current branch (or, for a copied "
                                          "folder, write its changed files back); refused, with the reason, when "
                                          "it conflicts, its tree changed after the snapshot, or a link points "
                                          "out of its tree")
    land.add_argument("name", metavar="NAME")
    land.set_defaults(run=run_apply)
    drop = verbs.add_parser("discard", help="remove an agent's worktree and branch (its changes are lost)")
    drop.add_argument("name", metavar="NAME", nargs="?")
    drop.add_argument("--all", action="store_true", help="every kept agent that is not running")
    drop.set_defaults(run=run_discard)


def print_workspaces() -> None:
    kept = all_workspaces()
    print(f"\nagent workspaces kept in {default_root()}: {len(kept) or 'none'}")
    for ws in kept:
        state = ws.state()  # before its changes: an agent ending meanwhile is still said to run, never kept
        try:
            found: Changes | None = changes(ws)
        except WorkspaceError as exc:
            found, why = None, str(exc)
        print(f"{ws.name:<16} {state:<12} {found.summary() if found else '-':<22} {ws.branch} from "
              f"{ws.target}{' (a copy)' if ws.mode == COPY else ''}")
        print(f"{'':<16} {ws.folder}")
        if found is None:
            print(f"{'':<16} cannot read its changes: {why}")
            continue
        if _note(found):
            print(f"{'':<16} {_note(found)}")
        for change in found.flagged:
            print(f"{'':<16} ! {change.shown()}: {', '.join(change.flags)}")


def _note(found: Changes) -> str:
    """What the changes are of, where it is not the final snapshot Apply lands."""
    if found.moved_on:
        return "tree moved on after its snapshot: Apply refuses it"
    return "" if found.final else "live tree, not final"


def run_diff(args: argparse.Namespace) -> int:
    ws = find(args.name)
    if args.stat:
        found = changes(ws)
        for change in found.files:
            added = "-" if change.added is None else change.added
            removed = "-" if change.removed is None else change.removed
            flagged = f"  ! {', '.join(change.flags)}" if change.flags else ""
            print(f"{change.status:<9} +{added:<6} -{removed:<6} {change.shown()}{flagged}")
        print(found.summary() + (f" ({_note(found)})" if _note(found) else ""))
    else:
        sys.stdout.write(diff_text(ws))
    return 0


def run_apply(args: argparse.Namespace) -> int:
    ws = find(args.name)
    done = apply(ws)
    print(f"applied agent {ws.name} to {ws.applied_to} ({done.how}, {done.commit[:12]}): {len(done.files)} file(s); "
          f"discard it with `swarm-panel agents discard {ws.name}`")
    return 0


def run_discard(args: argparse.Namespace) -> int:
    if args.all == (args.name is not None):
        raise WorkspaceError("name one agent, or --all")
    targets = all_workspaces() if args.all else [find(args.name)]
    failed = 0
    for ws in targets:
        try:
            discard(ws)
        except WorkspaceError as exc:
            failed += 1
            print(f"swarm-panel: {exc}", file=sys.stderr)
            continue
        print(f"discarded agent {ws.name}: its worktree and branch {ws.branch} are gone")
    return 1 if failed else 0
