"""Builds the engine the settings or a command's flags ask for."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from runtime.engine import Engine
from runtime.modeled_engine import ModeledEngine
from runtime.profiles import PROFILES

log = logging.getLogger(__name__)

# llama.cpp fixes n_seq_max when the context is made; leave room to widen the batch live.
LIVE_LANE_HEADROOM = 64


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=("modeled", "llama"), default="modeled",
                       help="modeled: the article's card as a cost model; llama: llama.cpp on a GGUF file")
    group.add_argument("--model", type=Path, default=None, help="GGUF file for --engine llama (default: demo model)")
    group.add_argument("--profile", choices=sorted(PROFILES), default=next(iter(PROFILES)),
                       help="card and model the modeled engine imitates")
    group.add_argument("--n-ctx", type=int, default=8192, help="llama.cpp context, shared by all lanes")
    group.add_argument("--n-batch", type=int, default=512, help="most tokens in one llama.cpp step")
    group.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1 = all)")
    group.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    group.add_argument("--kv-type", choices=("f16", "q8_0", "q4_0"), default="f16")
    group.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    group.add_argument("--no-kv-unified", dest="kv_unified", action="store_false",
                       help="split KV, as llama-server's slots: each lane its own n_ctx/max-batch share, attention over "
                            "its own cells only; reuse is a lane keeping its agent's conversation, not shared prefixes")


def build_engine(
    kind: str,
    *,
    realtime: bool,
    max_lanes: int,
    profile: str = next(iter(PROFILES)),
    model: Path | None = None,
    n_ctx: int = 8192,
    n_batch: int = 512,
    n_gpu_layers: int = 0,
    flash_attn: str = "auto",
    kv_type: str = "f16",
    threads: int | None = None,
    kv_unified: bool = True,
) -> Engine:
    if kind == "modeled":
        return ModeledEngine(PROFILES[profile], realtime=realtime, max_lanes=max(max_lanes, LIVE_LANE_HEADROOM))
    from runtime.demo_model import ensure_demo_model
    from runtime.llama_engine import LlamaEngine

    path = model if model is not None else ensure_demo_model()
    log.info("loading %s", path)
    return LlamaEngine(
        path,
        # Split KV divides the context by the lanes, so it gets exactly the lanes asked for.
        max_lanes=min(max(max_lanes, LIVE_LANE_HEADROOM), 256) if kv_unified else max_lanes,
        kv_unified=kv_unified,
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_gpu_layers=n_gpu_layers,
        flash_attn=flash_attn,
        kv_type=kv_type,
        n_threads=threads,
    )


def engine_for(options: object, *, realtime: bool, max_lanes: int) -> Engine:
    """The engine named by anything with the engine fields: parsed flags or Settings (same names)."""
    o = options
    return build_engine(
        o.engine, realtime=realtime, max_lanes=max_lanes, profile=o.profile, model=o.model,
        n_ctx=o.n_ctx, n_batch=o.n_batch, n_gpu_layers=o.n_gpu_layers, flash_attn=o.flash_attn,
        kv_type=o.kv_type, threads=o.threads, kv_unified=o.kv_unified,
    )
