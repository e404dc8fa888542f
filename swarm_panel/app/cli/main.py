"""The `swarm-panel` command's headless part: every subcommand that needs no desktop.

A front end (ui.shell.cli, the console script's entry) passes a FrontEnd to add its own subcommands, open
the panel when no subcommand is given and lend the gateway its fleet window; app never imports ui.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from swarm_panel.app.cli import agents as agents_cli
from swarm_panel.app.cli import bench, serve
from swarm_panel.app.cli import chaos as chaos_cli
from swarm_panel.app.cli import demo_model as demo_model_cli
from swarm_panel.app.cli import gateway as gateway_cli
from swarm_panel.app.cli import plan as plan_cli
from swarm_panel.app.cli import pull as pull_cli
from swarm_panel.app.cli import swarm as swarm_cli
from swarm_panel.runtime.core.engine import EngineLoadError


@dataclass(frozen=True)
class FrontEnd:
    register: Callable[[argparse._SubParsersAction], None]  # adds its subcommands
    open_panel: Callable[[], int]  # the command with no subcommand
    fleet_window: gateway_cli.FleetWindow  # `gateway --panel`


def build_parser(front_end: FrontEnd | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-panel",
        description="Continuous-batching LLM runtime and control panel for a swarm of local agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench.register(sub)
    serve.register(sub)
    gateway_cli.register(sub, fleet_window=front_end.fleet_window if front_end else None)
    swarm_cli.register(sub)
    chaos_cli.register(sub)
    demo_model_cli.register(sub)
    plan_cli.register(sub)
    pull_cli.register(sub)
    agents_cli.register(sub)
    if front_end is not None:
        front_end.register(sub)
    return parser


def main(argv: list[str] | None = None, front_end: FrontEnd | None = None) -> int:
    parser = build_parser(front_end)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per API call and the progress of long prompts: what a user watching an agent stall needs.
    logging.getLogger("swarm_panel.requests").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.command is None:
        if front_end is None:
            parser.print_help(sys.stderr)
            return 2
        return front_end.open_panel()
    try:
        return args.run(args)
    except (ValueError, EngineLoadError) as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
