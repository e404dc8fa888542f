"""`swarm-panel serve`: the OpenAI-compatible endpoint, headless, until Ctrl-C or SIGTERM.

Flags override SWARM_PANEL_* variables (SWARM_PANEL_NUM_LANES for --num-lanes), which override the
config file's keys (num_lanes = 8 in config.toml; see app.settings.schema); a flag left out keeps whatever
those say.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from swarm_panel.app.models_hub.choice import is_hub_name
from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.server.http_server import HttpServer, PortInUse, bind_socket
from swarm_panel.app.service.engine_service import SwarmService, share_the_interpreter
from swarm_panel.app.settings.flags import add_settings_arguments, given
from swarm_panel.app.settings.schema import GATEWAY_ONLY_FIELDS, Settings

log = logging.getLogger(__name__)

# Every Settings field but the gateway's: the engine, the scheduler, the endpoint and its limits.
SERVE_FIELDS = tuple(name for name in Settings.model_fields if name not in GATEWAY_ONLY_FIELDS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the OpenAI-compatible endpoint without the panel", description=__doc__)
    add_settings_arguments(p, SERVE_FIELDS)
    p.set_defaults(run=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(**given(args, SERVE_FIELDS))


def run_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        return asyncio.run(serve(settings))
    except PortInUse as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> int:
    """Loads the engine, serves until SIGINT/SIGTERM, then stops the server and the engine."""
    share_the_interpreter()
    service = SwarmService(settings)
    http = HttpServer(service)  # refuses an unsafe host before the model loads
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            loop.add_signal_handler(sig, stop.set)
    if http.port:
        bind_socket(http.host, http.port).close()  # a taken port is told now, not after the model has loaded
    try:
        if settings.engine == "llama" and is_hub_name(str(settings.model)):
            # In the foreground, with huggingface_hub's bar on stderr; the engine then finds it in the cache.
            await asyncio.to_thread(fetch, str(settings.model), lambda message: print(message, file=sys.stderr,
                                                                                        flush=True))
        print(f"loading the {settings.engine} engine...", file=sys.stderr, flush=True)
        await asyncio.to_thread(service.start)
    except Exception as exc:  # noqa: BLE001 - a bad model path or file is the user's to fix, not a traceback
        print(f"swarm-panel: error: cannot load the engine: {exc}", file=sys.stderr)
        return 1
    try:
        await http.start()
        print(f"serving {service.engine.facts.name or settings.engine} on {http.url}/v1 (Ctrl-C stops)",
              file=sys.stderr, flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        print("stopping...", file=sys.stderr, flush=True)
        await http.stop()
    finally:
        await asyncio.to_thread(service.stop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
    return 0
