"""Builds the engine the settings or a command's flags ask for."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from runtime.bundled_model import bundled_model_path, cpu_copy
from runtime.demo_model import ensure_demo_model
from runtime.engine import Engine
from runtime.modeled_engine import ModeledEngine
from runtime.profiles import PROFILES

log = logging.getLogger(__name__)

# llama.cpp fixes n_seq_max when the context is made; leave room to widen the batch live.
LIVE_LANE_HEADROOM = 64
# Model names a setting may give instead of a path.
BUNDLED_ALIAS = "smollm2"
DEMO_ALIAS = "demo"


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=("modeled", "llama"), default="modeled",
                       help="modeled: the article's card as a cost model; llama: llama.cpp on a GGUF file")
    group.add_argument("--model", type=Path, default=None,
                       help="GGUF file for --engine llama (default: the bundled SmolLM2-135M-Instruct; "
                            "'demo': the random-weight demo model)")
    group.add_argument("--profile", choices=sorted(PROFILES), default=next(iter(PROFILES)),
                       help="card and model the modeled engine imitates")
    group.add_argument("--n-ctx", type=int, default=8192, help="llama.cpp context, shared by all lanes")
    group.add_argument("--n-batch", type=int, default=512, help="most tokens in one llama.cpp step")
    group.add_argument("--n-gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1 = all)")
    group.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    group.add_argument("--kv-type", choices=("f16", "q8_0", "q4_0"), default="f16")
    group.add_argument("--threads", type=int, default=None,
                       help="CPU threads for llama.cpp (default: all cores but one on a CPU-only run, "
                            "llama.cpp's own default with GPU offload)")
    group.add_argument("--checkpoint-budget-mb", type=int, default=1024,
                       help="memory for recurrent-state checkpoints of hybrid models such as Qwen3.5 (0: none)")
    group.add_argument("--extra-buffers", choices=("auto", "on", "off"), default="auto",
                       help="llama.cpp's extra buffer types (AMX, repacked weights): auto runs a one-time probe in a "
                            "child process, because they crash or miscompute on some CPUs")
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
    extra_buffers: str = "auto",
    checkpoint_budget_mb: int = 1024,
) -> Engine:
    if kind == "modeled":
        return ModeledEngine(PROFILES[profile], realtime=realtime, max_lanes=max(max_lanes, LIVE_LANE_HEADROOM))
    from runtime.extra_buffers_probe import decide_extra_buffers
    from runtime.llama_engine import LlamaEngine, ModelLoadError

    path, note = resolve_model(model, n_gpu_layers)
    if not path.is_file():
        raise ModelLoadError(f"cannot load model {path}: no such file")
    decision = decide_extra_buffers(path, extra_buffers)
    log.info("loading %s (extra buffer types: %s)", path, decision.reason)
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
        extra_buffers=decision.enabled,
        extra_buffers_reason=decision.reason,
        note=note,
        checkpoint_budget_bytes=checkpoint_budget_mb << 20,
    )


def resolve_model(model: Path | str | None, n_gpu_layers: int = 0) -> tuple[Path, str | None]:
    """A GGUF path from a setting, and a note for the panel: none (or "smollm2") means the bundled
    real model, "demo" the random-weight one."""
    if model is None or str(model) == BUNDLED_ALIAS:
        shipped = bundled_model_path()
        if n_gpu_layers != 0:
            return shipped, None
        try:
            return cpu_copy(shipped), (f"The bundled {shipped.name}, served from an F16 copy: on a CPU, batched "
                                       "Q4_1 decoding drifts from decoding alone; F16 keeps a batch's tokens.")
        except OSError as exc:
            log.warning("%s; serving the Q4_1 file as shipped", exc)
            return shipped, None
    if str(model) == DEMO_ALIAS and not Path(model).exists():
        return ensure_demo_model(), None
    return Path(model).expanduser(), None


def engine_for(options: object, *, realtime: bool, max_lanes: int) -> Engine:
    """The engine named by anything with the engine fields: parsed flags or Settings (same names)."""
    o = options
    return build_engine(
        o.engine, realtime=realtime, max_lanes=max_lanes, profile=o.profile, model=o.model,
        n_ctx=o.n_ctx, n_batch=o.n_batch, n_gpu_layers=o.n_gpu_layers, flash_attn=o.flash_attn,
        kv_type=o.kv_type, threads=o.threads, kv_unified=o.kv_unified, extra_buffers=o.extra_buffers,
        checkpoint_budget_mb=o.checkpoint_budget_mb,
    )
