"""`swarm-panel demo-model PATH --size tiny|demo --arch llama|qwen35`: write a random-weight GGUF."""

from __future__ import annotations

import argparse
from pathlib import Path

from swarm_panel.runtime.models.demo import ARCHS, write_demo_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo-model",
        help="write a random-weight GGUF (its text is noise: it exists to measure batching and test memory)",
        description=__doc__,
    )
    p.add_argument("path", type=Path)
    p.add_argument("--size", choices=("tiny", "demo"), default="demo",
                   help="tiny: about 1 MB, for tests; demo: 142M parameters, where batching visibly pays")
    p.add_argument("--arch", choices=ARCHS, default="llama",
                   help="llama: plain attention (the batching demo); qwen35: Qwen3.5's hybrid of recurrent "
                        "(Gated DeltaNet) and attention layers, one recurrent state per sequence")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = write_demo_model(args.path, args.size, seed=args.seed, arch=args.arch)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, random weights: its output is noise)")
    return 0
