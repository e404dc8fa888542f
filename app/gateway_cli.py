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
from pathlib import Path

from app.backends import parse_backend
from app.http_server import PortInUse
from app.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="one OpenAI-compatible endpoint in front of several engines",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", dest="backends", action="append", type=parse_backend, default=None,
                   metavar="[KIND=]URL", help="a backend, e.g. vllm=http://gpu-box:8000 or http://127.0.0.1:8081 "
                   "(kind: vllm, llama-server, swarm-panel; default: told by its /metrics); repeatable")
    p.add_argument("--host", default=argparse.SUPPRESS, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=argparse.SUPPRESS, help="TCP port (default 8000; 0 = any free)")
    p.add_argument("--api-key", dest="api_key", default=argparse.SUPPRESS, help="bearer token clients must send")
    p.add_argument("--policy", dest="gateway_policy", choices=("continuous", "fair"), default=argparse.SUPPRESS,
                   help="admission order: continuous (first come first served) or fair (fewest open requests first)")
    p.add_argument("--routing", dest="gateway_routing", choices=("affinity", "round-robin"),
                   default=argparse.SUPPRESS, help="affinity (default): an agent stays where its prefix is cached")
    p.add_argument("--max-waiting", dest="max_waiting", type=int, default=argparse.SUPPRESS,
                   help="requests queued in the gateway beyond which clients get 503")
    p.add_argument("--insecure-public-without-api-key", dest="insecure_public_without_api_key",
                   action="store_true", default=argparse.SUPPRESS, help="allow a non-loopback --host without a key")
    p.add_argument("--panel", action="store_true", help="also open the fleet window")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PATH",
                   help="with --panel: grab the window to this PNG before quitting (needs --quit-after)")
    p.add_argument("--quit-after", type=float, default=None, metavar="S", help="stop after S seconds")
    p.set_defaults(run=run)


def settings_from_args(args: argparse.Namespace) -> Settings:
    fields = ("host", "port", "api_key", "gateway_policy", "gateway_routing", "max_waiting",
              "insecure_public_without_api_key")
    overrides = {f: getattr(args, f) for f in fields if hasattr(args, f)}
    if args.backends:
        overrides["backends"] = args.backends
    settings = Settings(**overrides)
    if not settings.backends:
        raise ValueError("no backends: pass --backend URL (repeatable) or set [[backends]] in config.toml")
    return settings


def run(args: argparse.Namespace) -> int:
    if args.screenshot is not None and (args.quit_after is None or not args.panel):
        raise ValueError("--screenshot needs --panel and --quit-after S (when to take it)")
    settings = settings_from_args(args)
    try:
        if args.panel:
            from ui.fleet_window import run_fleet_window

            return run_fleet_window(settings, screenshot=args.screenshot, quit_after=args.quit_after)
        return asyncio.run(serve_gateway(settings, quit_after=args.quit_after))
    except PortInUse as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def serve_gateway(settings: Settings, quit_after: float | None = None) -> int:
    from app.gateway_http import GatewayServer

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
