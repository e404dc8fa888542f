"""`swarm-panel desktop install | uninstall`: the menu entry, its icon and start at login (ui.desktop.entry)."""

from __future__ import annotations

import argparse
import sys

from swarm_panel.ui.desktop import entry


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("desktop", help="add the panel to the desktop's menu, or remove it",
                       description="Writes or removes the panel's menu entry and icon under your XDG folders "
                                   "($XDG_DATA_HOME, else ~/.local/share), and with --autostart an entry that starts "
                                   "it at login ($XDG_CONFIG_HOME/autostart). The entries run this installation's "
                                   "swarm-panel command.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = actions.add_parser("install", help="write the menu entry and the icon")
    install.add_argument("--autostart", action="store_true",
                         help="start the panel at login too (without it, an earlier install's login entry is removed)")
    install.set_defaults(run=run_install)
    uninstall = actions.add_parser("uninstall", help="remove the menu entry, the icon and the login entry")
    uninstall.set_defaults(run=run_uninstall)


def run_install(args: argparse.Namespace) -> int:
    try:
        written, removed = entry.install(args.autostart)
    except OSError as exc:
        print(f"swarm-panel: error: cannot install the menu entry: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    for path in removed:
        print(f"removed {path}")
    print(f"the entry runs: {' '.join(entry.installed_command())}")
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    try:
        removed = entry.uninstall()
    except OSError as exc:
        print(f"swarm-panel: error: cannot remove the menu entry: {exc}", file=sys.stderr)
        return 1
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print("nothing to remove: no menu entry, icon or login entry of swarm-panel is installed")
    return 0
