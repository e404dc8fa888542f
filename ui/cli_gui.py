"""`swarm-panel gui`: the desktop panel. Imports no Qt until the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.backends import parse_backend


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gui", help="open the desktop control panel (the default command)",
                       description="The desktop panel: live plots, lane timeline, policy switch, swarm launcher.")
    p.add_argument("--engine", choices=("modeled", "llama"), default=None,
                   help="modeled: the article's card as a cost model; llama: llama.cpp (demo model unless --model)")
    p.add_argument("--model", type=Path, default=None, help="GGUF file for the llama engine")
    p.add_argument("--port", type=int, default=None, help="TCP port of the endpoint (default 8000; 0 = any free)")
    p.add_argument("--policy", choices=("naive", "shrinking", "continuous"), default=None, help="starting policy")
    p.add_argument("--swarm", type=int, default=None, metavar="N",
                   help="start the built-in swarm with N agents against the panel's own endpoint")
    p.add_argument("--switch", default=None, metavar="POLICY@SECONDS",
                   help="switch the policy that many seconds in (e.g. continuous@20), for scripted captures")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PATH",
                   help="grab the whole window to this PNG before quitting (with --quit-after)")
    p.add_argument("--quit-after", type=float, default=None, metavar="S", help="close the window after S seconds")
    p.add_argument("--backend", dest="backends", action="append", type=_backend, default=None,
                   metavar="[KIND=]URL", help="open on a fleet: the endpoint serves through the gateway in front of "
                   "this backend (vllm=http://gpu-box:8000, http://127.0.0.1:8081; optional key=K weight=W "
                   "slots=N name=L in the same argument); repeatable. The engine box switches back")
    p.add_argument("--settings-file", type=Path, default=None, metavar="INI",
                   help="remember panel settings in this file instead of the user's Qt settings")
    p.set_defaults(run=run)


def _backend(text: str):
    try:
        return parse_backend(text)
    except ValueError as exc:  # argparse shows only its own "invalid value" for anything but this type
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if args.screenshot is not None and args.quit_after is None:
        raise ValueError("--screenshot needs --quit-after S (when to take it)")
    from ui.app_main import run_gui

    return run_gui(engine=args.engine, model=args.model, port=args.port, swarm=args.swarm,
                   screenshot=args.screenshot, quit_after=args.quit_after, policy=args.policy, switch=args.switch,
                   settings_file=args.settings_file, backends=args.backends)
