"""The `swarm-panel` console script: app's headless commands plus the desktop's.

The composition root: it hands app.cli.main the panel's subcommand (gui), the panel to open when no
subcommand is given, and the fleet window `gateway --panel` opens; app itself never imports ui.
Importing this module imports no Qt; a desktop command loads it when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from swarm_panel.app.cli import main as cli
from swarm_panel.app.settings.schema import Settings
from swarm_panel.ui.shell import cli_gui


def _open_panel() -> int:
    from swarm_panel.ui.shell.app_main import run_gui

    return run_gui()


def _fleet_window(settings: Settings, screenshot: Path | None, quit_after: float | None) -> int:
    from swarm_panel.ui.fleet.fleet_window import run_fleet_window

    return run_fleet_window(settings, screenshot=screenshot, quit_after=quit_after)


FRONT_END = cli.FrontEnd(register=cli_gui.register, open_panel=_open_panel, fleet_window=_fleet_window)


def build_parser():
    return cli.build_parser(FRONT_END)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, FRONT_END)


if __name__ == "__main__":
    sys.exit(main())
