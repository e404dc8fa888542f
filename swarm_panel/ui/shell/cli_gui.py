"""`swarm-panel gui`, and `swarm-panel` alone or with these options: the desktop panel. Imports no Qt until the
command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_panel.app.settings.flags import add_settings_arguments, given

# The Settings fields the panel takes from its command line; the rest come from what it remembers,
# the SWARM_PANEL_* variables and the config file.
GUI_FIELDS = ("engine", "model", "port", "policy", "backends")
GUI_NOTES = {
    "engine": "none given: the engine loaded at the last close",
    "policy": "the starting policy",
    "backends": "open on a fleet: the endpoint serves through the gateway in front of these backends; "
                "the engine box switches back",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the desktop control panel (the default command: `swarm-panel [OPTIONS]`)",
                       description="The desktop panel: live plots, lane timeline, policy switch, swarm launcher. "
                                   "One runs per user and settings file: a second launch brings it to the front.")
    add_settings_arguments(p, GUI_FIELDS, notes=GUI_NOTES)
    p.add_argument("--swarm", type=int, default=None, metavar="N",
                   help="start the built-in swarm with N agents against the panel's own endpoint")
    p.add_argument("--switch", default=None, metavar="POLICY@SECONDS",
                   help="switch the policy that many seconds in (e.g. continuous@20), for scripted captures")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PATH",
                   help="grab the whole window to this PNG before quitting (with --quit-after)")
    p.add_argument("--quit-after", type=float, default=None, metavar="S", help="close the window after S seconds")
    p.add_argument("--settings-file", type=Path, default=None, metavar="INI",
                   help="remember panel settings in this file instead of the user's Qt settings (a panel of its own: "
                        "one runs per settings file)")
    p.add_argument("--new-instance", action="store_true",
                   help="start a second panel beside the one running (on a free port if its port is taken)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.screenshot is not None and args.quit_after is None:
        raise ValueError("--screenshot needs --quit-after S (when to take it)")
    from swarm_panel.ui.shell.app_main import run_gui

    return run_gui(**given(args, GUI_FIELDS), swarm=args.swarm, screenshot=args.screenshot,
                   quit_after=args.quit_after, switch=args.switch, settings_file=args.settings_file,
                   new_instance=args.new_instance)
