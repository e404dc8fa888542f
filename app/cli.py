"""The `swarm-panel` command."""

from __future__ import annotations

import argparse
import logging
import sys

from app import bench, chaos_cli, demo_model_cli, gateway_cli, serve, swarm_cli
from runtime.engine import EngineLoadError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-panel",
        description="Continuous-batching LLM runtime and control panel for a swarm of local agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench.register(sub)
    serve.register(sub)
    gateway_cli.register(sub)
    swarm_cli.register(sub)
    chaos_cli.register(sub)
    demo_model_cli.register(sub)
    from ui import cli_gui  # lazy: the panel's subcommand (ui.cli_gui imports no Qt)

    cli_gui.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command is None:  # no subcommand opens the panel
        from ui.app_main import run_gui

        return run_gui()
    try:
        return args.run(args)
    except (ValueError, EngineLoadError) as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
