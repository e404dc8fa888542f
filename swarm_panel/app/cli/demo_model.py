"""`swarm-panel demo-model PATH --shape tiny|demo|9b --arch llama|qwen35 --type f16|q4_k_m`: write a
random-weight GGUF.

--shape 9b (with --arch qwen35) is Qwen3.5-9B's shape, 8.95B parameters, written streaming and quantized to
Q4_K_M by llama.cpp's own quantizer: a step on it costs what it costs on the real model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gguf

from swarm_panel.runtime.models.demo import ARCHS, SHAPES, write_demo_model
from swarm_panel.runtime.models.demo_hybrid import HYBRID_SHAPES
from swarm_panel.runtime.models.target_shape import (
    MODEL_TYPES,
    parameter_count,
    write_model_file,
    write_target_shape_model,
)

# How often a stage's progress line is printed at most, in seconds (the first and last always are).
_PROGRESS_EVERY_S = 2.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo-model",
        help="write a random-weight GGUF (its text is noise: it exists to measure batching and test memory)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", type=Path)
    p.add_argument("--shape", "--size", dest="shape", choices=tuple(HYBRID_SHAPES), default="demo",
                   help="tiny: about 1 MB, for tests; demo: 120-142M parameters, where batching visibly pays; "
                        "9b (qwen35 only): Qwen3.5-9B's shape, 5.6 GB as Q4_K_M (default demo)")
    p.add_argument("--arch", choices=ARCHS, default="llama",
                   help="llama: plain attention (the batching demo); qwen35: Qwen3.5's hybrid of recurrent "
                        "(Gated DeltaNet) and attention layers, one recurrent state per sequence")
    p.add_argument("--type", dest="model_type", choices=MODEL_TYPES, default=None,
                   help="f16, or q4_k_m by llama.cpp's quantizer (default q4_k_m for 9b, f16 otherwise)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.arch == "llama" and args.shape not in SHAPES:
        raise ValueError(f"--shape {args.shape} is a Qwen3.5 shape: it needs --arch qwen35")
    model_type = args.model_type or ("q4_k_m" if args.shape == "9b" else "f16")
    progress = _ProgressLines()
    started = time.monotonic()
    if args.arch == "qwen35":
        # Streaming: the demo shapes come out as write_demo_model writes them, and 9b fits in memory.
        shape = HYBRID_SHAPES[args.shape]
        path = write_target_shape_model(args.path, shape, model_type, seed=args.seed, progress=progress)
        n_params = parameter_count(shape)
    else:
        path = write_model_file(args.path, lambda f16: write_demo_model(f16, args.shape, seed=args.seed),
                                model_type, progress)
        n_params = sum(int(t.n_elements) for t in gguf.GGUFReader(path).tensors)
    progress.finish()
    print(f"wrote {path} ({path.stat().st_size / 1e6:,.1f} MB, {model_type.upper()}, {n_params:,} parameters, "
          f"{time.monotonic() - started:.0f} s; random weights: its output is noise)")
    return 0


class _ProgressLines:
    """Progress on stderr: a line per stage now and then, and how long each stage took."""

    def __init__(self) -> None:
        self._stage: str | None = None
        self._stage_started = self._last_line = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage != self._stage:
            self.finish()
            self._stage, self._stage_started, self._last_line = stage, now, 0.0
        if done == total or done == 0 or now - self._last_line >= _PROGRESS_EVERY_S:
            if total == 0:
                line = "quantizing with llama.cpp's quantizer"
            else:
                verb = "writing F16" if stage == "write" else "quantizing"
                line = f"{verb}: {done}/{total} tensors ({now - self._stage_started:.0f} s)"
            print(line, file=sys.stderr, flush=True)
            self._last_line = now

    def finish(self) -> None:
        if self._stage is not None:
            print(f"{self._stage} took {time.monotonic() - self._stage_started:.1f} s", file=sys.stderr, flush=True)
        self._stage = None
