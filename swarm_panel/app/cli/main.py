"""The `swarm-panel` command's headless part: every subcommand that needs no desktop.

A front end (ui.shell.cli, the console script's entry) passes a FrontEnd to add its own subcommands, name the
one run when none is given (`swarm-panel` alone or with that command's options) and lend the gateway its fleet
window; app never imports ui.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from swarm_panel.app.cli import agents as agents_cli
from swarm_panel.app.cli import bench, secret_args, serve
from swarm_panel.app.cli import chaos as chaos_cli
from swarm_panel.app.cli import demo_model as demo_model_cli
from swarm_panel.app.cli import gateway as gateway_cli
from swarm_panel.app.cli import plan as plan_cli
from swarm_panel.app.cli import pull as pull_cli
from swarm_panel.app.cli import swarm as swarm_cli
from swarm_panel.app.supervisor.supervise import Crash, supervise, supervised
from swarm_panel.runtime.core.engine import EngineLoadError

GLOBAL_FLAGS = ("-v", "--verbose")


@dataclass(frozen=True)
class FrontEnd:
    register: Callable[[argparse._SubParsersAction], None]  # adds its subcommands
    default: str  # one of them, run when no subcommand is named
    fleet_window: gateway_cli.FleetWindow  # `gateway --panel`
    # After the panel's process crashed in native code: whether to start it again (asks the user).
    offer_restart: Callable[[Crash], bool] = lambda crash: False


# Commands that serve for hours: a native crash in them is reported by a supervising process (app.supervisor).
SUPERVISED = ("serve", "gui")


def with_default(argv: list[str], default: str) -> list[str]:
    """`swarm-panel [OPTIONS]` as `swarm-panel DEFAULT [OPTIONS]`: nothing, or an option, where a command would be."""
    start = 0
    while start < len(argv) and argv[start] in GLOBAL_FLAGS:
        start += 1
    rest = argv[start:]
    if not rest or (rest[0].startswith("-") and rest[0] not in ("-h", "--help")):
        return [*argv[:start], default, *rest]
    return argv


def build_parser(front_end: FrontEnd | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-panel",
        description="Continuous-batching LLM runtime and control panel for a swarm of local agents."
                    + (f" With no command, or with only {front_end.default}'s options, it runs `{front_end.default}`."
                       if front_end is not None else ""),
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
    """`argv` None: this process's own arguments, and the long-running commands run under a supervisor."""
    from_process = argv is None
    if from_process:
        # A native crash prints every thread's Python stack to stderr before the process dies.
        faulthandler.enable()
    parser = build_parser(front_end)
    argv = list(sys.argv[1:] if argv is None else argv)
    given = argv
    if front_end is not None:
        argv = with_default(argv, front_end.default)
    args = parser.parse_args(argv)
    if from_process:
        # After parsing, so that a command without --api-key still refuses one.
        secret_args.hide_key(given)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per API call and the progress of long prompts: what a user watching an agent stall needs.
    logging.getLogger("swarm_panel.requests").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if from_process and args.command in SUPERVISED and not supervised():
        gui = front_end is not None and args.command == front_end.default
        return supervise(given, front_end.offer_restart if gui else lambda crash: False)
    try:
        return args.run(args)
    except (ValueError, EngineLoadError) as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
