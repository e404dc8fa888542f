"""`swarm-panel gateway`: one endpoint in front of several engines (vLLM, llama-server, swarm-panel serve).

Agents use the gateway's URL as they would one server's; it queues per agent, admits by policy,
routes each agent to the backend holding its prefix and forwards every /v1 request there. Backends
come from --backend flags, else from the settings (`[[backends]]` in config.toml, SWARM_PANEL_BACKENDS).
With --panel a window plots each backend's occupancy, queue, KV, tok/s and prefix hit rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from swarm_panel.app.server.http_server import PortInUse
from swarm_panel.app.settings.flags import add_settings_arguments, given
from swarm_panel.app.settings.schema import Settings

# The Settings fields the gateway reads, and the flags it has always spelled its own way.
GATEWAY_FIELDS = ("backends", "host", "port", "api_key", "gateway_policy", "gateway_routing", "max_waiting",
                  "insecure_public_without_api_key", "stream_heartbeat_s")
GATEWAY_SPELLINGS = {"gateway_policy": "--policy", "gateway_routing": "--routing"}
GATEWAY_NOTES = {"backends": "kind: vllm, llama-server, swarm-panel, or told by its /metrics"}
# Opens the fleet window: (settings, screenshot, quit_after) -> exit status. The desktop front end
# lends it (ui.shell.cli); app never imports ui.
FleetWindow = Callable[[Settings, Path | None, float | None], int]


def register(sub: argparse._SubParsersAction, fleet_window: FleetWindow | None = None) -> None:
    p = sub.add_parser("gateway", help="one OpenAI-compatible endpoint in front of several engines",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_settings_arguments(p, GATEWAY_FIELDS, spellings=GATEWAY_SPELLINGS, notes=GATEWAY_NOTES)
    p.add_argument("--panel", action="store_true", help="also open the fleet window")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PATH",
                   help="with --panel: grab the window to this PNG before quitting (needs --quit-after)")
    p.add_argument("--quit-after", type=float, default=None, metavar="S", help="stop after S seconds")
    p.set_defaults(run=run, fleet_window=fleet_window)


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings(**given(args, GATEWAY_FIELDS))
    if not settings.backends:
        raise ValueError("no backends: pass --backend URL (repeatable) or set [[backends]] in config.toml")
    return settings


def run(args: argparse.Namespace) -> int:
    if args.screenshot is not None and (args.quit_after is None or not args.panel):
        raise ValueError("--screenshot needs --panel and --quit-after S (when to take it)")
    if args.panel and args.fleet_window is None:
        raise ValueError("--panel needs the desktop panel: run it as `swarm-panel gateway --panel`")
    settings = settings_from_args(args)
    try:
        if args.panel:
            return args.fleet_window(settings, args.screenshot, args.quit_after)
        return asyncio.run(serve_gateway(settings, quit_after=args.quit_after))
    except PortInUse as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def serve_gateway(settings: Settings, quit_after: float | None = None) -> int:
    from swarm_panel.app.gateway.http_server import GatewayServer

    server = GatewayServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    if quit_after is not None:
        loop.call_later(quit_after, stop.set)
    await server.start()
    names = ", ".join(f"{b.label} ({b.kind}, {'up' if b.up else 'down'})" for b in server.gateway.backends)
    print(f"gateway on {server.url}/v1 in front of {names} (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        await stop.wait()
        print("stopping...", file=sys.stderr, flush=True)
    finally:
        await server.stop()
    return 0
