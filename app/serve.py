"""`swarm-panel serve`: the OpenAI-compatible endpoint, headless, until Ctrl-C or SIGTERM.

Flags override SWARM_PANEL_* variables, which override the config file (see app.settings); a flag
left out keeps whatever those say.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from app.http_server import HttpServer, PortInUse
from app.service import SwarmService, share_the_interpreter
from app.settings import Settings

log = logging.getLogger(__name__)

# (flag, Settings field, argparse options); every default is "not given".
_FLAGS: list[tuple[str, str, dict]] = [
    ("--host", "host", {"help": "address to listen on (default 127.0.0.1; others need --api-key)"}),
    ("--port", "port", {"type": int, "help": "TCP port (default 8000; 0 = any free port)"}),
    ("--api-key", "api_key", {"help": "bearer token clients must send"}),
    ("--cors-origin", "cors_origins", {"action": "append", "help": "origin allowed by CORS (repeatable)"}),
    ("--engine", "engine", {"choices": ("modeled", "llama"), "help": "llama (default) or modeled"}),
    ("--model", "model", {"type": Path, "help": "GGUF file for the llama engine (default: the bundled "
                                                "SmolLM2-135M-Instruct; 'demo': the random-weight demo model)"}),
    ("--profile", "profile", {"help": "card profile the modeled engine imitates"}),
    ("--policy", "policy", {"choices": ("naive", "shrinking", "continuous"), "help": "batching policy"}),
    ("--max-batch", "max_batch", {"type": int, "help": "most sequences in one step"}),
    ("--prefill-chunk", "prefill_chunk", {"type": int, "help": "prompt tokens one step carries"}),
    ("--kv-budget", "kv_budget", {"type": int, "help": "KV tokens the scheduler may use"}),
    ("--admission-wait", "admission_wait_s", {"type": float, "help": "seconds a static batch waits to fill"}),
    ("--no-prefix-cache", "prefix_cache", {"action": "store_false",
                                           "help": "recompute every prompt (no KV reuse across requests)"}),
    ("--n-ctx", "n_ctx", {"type": int, "help": "llama.cpp context, shared by all lanes"}),
    ("--n-batch", "n_batch", {"type": int, "help": "most tokens in one llama.cpp step"}),
    ("--n-gpu-layers", "n_gpu_layers", {"type": int, "help": "layers offloaded to the GPU (-1 = all)"}),
    ("--kv-type", "kv_type", {"choices": ("f16", "q8_0", "q4_0"), "help": "KV cache element type"}),
    ("--flash-attn", "flash_attn", {"choices": ("auto", "on", "off"), "help": "llama.cpp flash attention"}),
    ("--threads", "threads", {"type": int, "help": "CPU threads for llama.cpp (default: all cores but one on "
                                                   "the CPU, llama.cpp's default with GPU offload)"}),
    ("--checkpoint-budget-mb", "checkpoint_budget_mb", {"type": int, "help": "memory for recurrent-state "
                                                        "checkpoints of hybrid models such as Qwen3.5 (0: none)"}),
    ("--extra-buffers", "extra_buffers", {"choices": ("auto", "on", "off"),
                                          "help": "llama.cpp's extra buffer types (AMX, repacked weights); auto: "
                                                  "a one-time probe in a child process decides"}),
    ("--no-kv-unified", "kv_unified", {"action": "store_false",
                                       "help": "split KV as llama-server: each lane its own n_ctx/max-batch share; "
                                               "faster attention on small models, no cross-lane prefix sharing"}),
    ("--max-waiting", "max_waiting", {"type": int, "help": "queued requests beyond which clients get 503"}),
    ("--max-body-bytes", "max_body_bytes", {"type": int, "help": "largest request body accepted"}),
    ("--max-prompt-chars", "max_prompt_chars", {"type": int, "help": "longest prompt accepted, in characters"}),
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the OpenAI-compatible endpoint without the panel", description=__doc__)
    for flag, field, options in _FLAGS:
        p.add_argument(flag, dest=field, default=argparse.SUPPRESS, **options)
    p.add_argument("--insecure-public-without-api-key", dest="insecure_public_without_api_key",
                   action="store_true", default=argparse.SUPPRESS,
                   help="allow a non-loopback --host without --api-key")
    p.set_defaults(run=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    fields = {field for _, field, _ in _FLAGS} | {"insecure_public_without_api_key"}
    overrides = {field: getattr(args, field) for field in fields if hasattr(args, field)}
    return Settings(**overrides)


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
    print(f"loading the {settings.engine} engine...", file=sys.stderr, flush=True)
    try:
        await asyncio.to_thread(service.start)
    except Exception as exc:  # noqa: BLE001 - a bad model path or file is the user's to fix, not a traceback
        print(f"swarm-panel: error: cannot load the engine: {exc}", file=sys.stderr)
        return 1
    try:
        await http.start()
        facts = service.describe()
        print(f"serving {facts.get('name') or settings.engine} on {http.url}/v1 (Ctrl-C stops)",
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
