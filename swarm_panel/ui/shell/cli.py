"""The `swarm-panel` console script: app's headless commands plus the desktop's.

The composition root: it hands app.cli.main the desktop's subcommands (gui, desktop), gui as the one run
when none is named, and the fleet window `gateway --panel` opens; app itself never imports ui.
Importing this module imports no Qt; a desktop command loads it when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from swarm_panel.app.cli import main as cli
from swarm_panel.app.settings.schema import Settings
from swarm_panel.ui.shell import cli_desktop, cli_gui


def _register(sub) -> None:
    cli_gui.register(sub)
    cli_desktop.register(sub)


def _fleet_window(settings: Settings, screenshot: Path | None, quit_after: float | None) -> int:
    from swarm_panel.ui.fleet.fleet_window import run_fleet_window

    return run_fleet_window(settings, screenshot=screenshot, quit_after=quit_after)


def _offer_restart(crash) -> bool:
    from swarm_panel.ui.shell.crash_dialog import offer_restart

    return offer_restart(crash)


FRONT_END = cli.FrontEnd(register=_register, default="gui", fleet_window=_fleet_window, offer_restart=_offer_restart)


def build_parser():
    return cli.build_parser(FRONT_END)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, FRONT_END)


if __name__ == "__main__":
    sys.exit(main())
