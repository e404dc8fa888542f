"""Builds the engine a command asked for."""

from __future__ import annotations

import argparse

from runtime.engine import Engine
from runtime.modeled_engine import ModeledEngine
from runtime.profiles import PROFILES


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=("modeled", "llama"), default="modeled",
                       help="modeled: the article's card as a cost model; llama: llama.cpp on a GGUF file")
    group.add_argument("--profile", choices=sorted(PROFILES), default=next(iter(PROFILES)),
                       help="card and model the modeled engine imitates")


def make_engine(args: argparse.Namespace, *, realtime: bool, max_lanes: int) -> Engine:
    if args.engine == "modeled":
        return ModeledEngine(PROFILES[args.profile], realtime=realtime, max_lanes=max(max_lanes, 1))
    raise SystemExit("the llama.cpp engine is not available in this build")
