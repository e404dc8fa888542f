"""Builds the engine the settings or a command's flags ask for."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from swarm_panel.app.models_hub.choice import is_hub_name
from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.settings.fields import field_spec
from swarm_panel.app.settings.flags import add_settings_arguments
from swarm_panel.runtime.core.config import auto_kv_unified
from swarm_panel.runtime.core.engine import Engine
from swarm_panel.runtime.core.progress import Progress, no_progress
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import PROFILES
from swarm_panel.runtime.models.bundled import bundled_model_path, cpu_copy
from swarm_panel.runtime.models.demo import QWEN35_VOCAB, ensure_demo_model

log = logging.getLogger(__name__)

# llama.cpp fixes n_seq_max when the context is made; leave room to widen the batch live.
LIVE_LANE_HEADROOM = 64
# Model names a setting may give instead of a path.
BUNDLED_ALIAS = "smollm2"
DEMO_ALIAS = "demo"
# The CPU stand-in for a card: a tiny random qwen35 with Qwen3.5's 248,320-token vocabulary, whose fast
# steps and large logits show the host's share of a step (docs/gpu.md).
STANDIN_ALIAS = "standin"
# The Settings fields that pick and shape the engine.
ENGINE_FIELDS = ("engine", "model", "profile", "n_ctx", "n_batch", "n_gpu_layers", "flash_attn", "kv_type",
                 "threads", "checkpoint_budget_mb", "extra_buffers", "backend_sampling", "kv_unified",
                 "park_budget_mb", "prefix_store", "prefix_store_ram_mb", "prefix_store_disk_mb",
                 "prefix_store_min_tokens")


def add_engine_arguments(parser: argparse.ArgumentParser, **how: Any) -> None:
    """The engine fields' flags, in a group; `how` as app.settings.flags.add_settings_arguments takes it."""
    add_settings_arguments(parser.add_argument_group("engine"), ENGINE_FIELDS, **how)


def build_engine(kind: str, *, realtime: bool, max_lanes: int, **fields: Any) -> Engine:
    """The engine `kind` with the engine fields given; the rest take their Settings defaults."""
    unknown = set(fields) - set(ENGINE_FIELDS)
    if unknown:
        raise TypeError(f"not engine settings: {', '.join(sorted(unknown))}")
    options = {name: field_spec(name).default for name in ENGINE_FIELDS} | fields | {"engine": kind}
    return engine_for(SimpleNamespace(**options), realtime=realtime, max_lanes=max_lanes)


def engine_for(options: object, *, realtime: bool, max_lanes: int, leave_a_core: bool = False,
               progress: Progress = no_progress) -> Engine:
    """The engine named by anything with the engine fields: parsed flags or Settings (same names).

    `leave_a_core`: with no threads set, a CPU run keeps one core for a desktop panel in the process.
    `progress` hears each start-up stage: the model's copy, the CPU probes, the weights' load."""
    o = options
    if o.engine == "modeled":
        return ModeledEngine(PROFILES[o.profile].with_kv_type(o.kv_type), realtime=realtime,
                             max_lanes=max(max_lanes, LIVE_LANE_HEADROOM))
    from swarm_panel.runtime.llama.backend_sampling import choose_backend_sampling
    from swarm_panel.runtime.llama.cpu_tuning.door import engine_tuning
    from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import ProbeLayout
    from swarm_panel.runtime.llama.engine import LlamaEngine
    from swarm_panel.runtime.llama.model import ModelLoadError, on_cpu
    from swarm_panel.runtime.reuse.stored_files import PrefixStoreOptions

    path, note = resolve_model(o.model, o.n_gpu_layers, progress)
    if not path.is_file():
        raise ModelLoadError(f"cannot load model {path}: no such file")
    unified = auto_kv_unified(o.n_ctx, max_lanes) if o.kv_unified is None else o.kv_unified
    tuning = engine_tuning(path, offloaded=not on_cpu(o.n_gpu_layers), extra_buffers=o.extra_buffers,
                           flash_attn=o.flash_attn, layout=ProbeLayout(o.n_ctx, max_lanes, unified),
                           kv_type=o.kv_type, n_threads=o.threads, progress=progress)
    backend_sampling, backend_sampling_reason = choose_backend_sampling(o.backend_sampling,
                                                                       offloads=not on_cpu(o.n_gpu_layers))
    log.info("loading %s (extra buffer types: %s; flash attention: %s; sampling in the graph: %s)", path,
             tuning.extra_buffers_reason, tuning.flash_attn_reason, backend_sampling_reason)
    return LlamaEngine(
        path,
        # Split KV divides the context by the lanes, so it gets exactly the lanes asked for.
        max_lanes=min(max(max_lanes, LIVE_LANE_HEADROOM), 256) if unified else max_lanes,
        kv_unified=unified,
        # A layout the user did not choose gives way to a request that needs more than a lane's share.
        widens=o.kv_unified is None,
        n_ctx=o.n_ctx,
        n_batch=o.n_batch,
        n_gpu_layers=o.n_gpu_layers,
        flash_attn=tuning.flash_attn,
        flash_attn_reason=tuning.flash_attn_reason,
        attention_curve=tuning.attention_curve,
        kv_type=o.kv_type,
        n_threads=o.threads,
        leave_a_core=leave_a_core,
        extra_buffers=tuning.extra_buffers,
        extra_buffers_reason=tuning.extra_buffers_reason,
        backend_sampling=backend_sampling,
        backend_sampling_reason=backend_sampling_reason,
        note=note,
        checkpoint_budget_bytes=o.checkpoint_budget_mb << 20,
        park_cached=o.park_budget_mb > 0,
        park_budget_bytes=o.park_budget_mb << 20,
        prefix_store=PrefixStoreOptions(o.prefix_store_ram_mb << 20, o.prefix_store_disk_mb << 20,
                                        o.prefix_store_min_tokens) if o.prefix_store else None,
        progress=progress,
    )


def resolve_model(model: Path | str | None, n_gpu_layers: int = 0,
                  progress: Progress = no_progress) -> tuple[Path, str | None]:
    """A GGUF path from a setting, and a note for the panel: none (or "smollm2") means the bundled
    real model, "demo" the random-weight one, "hf:ORG/REPO[:QUANT]" a hub model (the cache first)."""
    if is_hub_name(str(model)):
        def say(message: str) -> None:
            # In the log for `serve` (huggingface_hub's bar goes to stderr), and to the panel's start-up stage.
            log.info("%s", message)
            progress(message, None)

        return fetch(str(model), say=say), None
    if model is None or str(model) == BUNDLED_ALIAS:
        shipped = bundled_model_path()
        from swarm_panel.runtime.llama.model import on_cpu

        if not on_cpu(n_gpu_layers):
            return shipped, None
        progress(f"preparing an F16 copy of {shipped.name} for the CPU (written once)", None)
        copy = cpu_copy(shipped)  # None, with a warning, where it cannot be written: the file as shipped serves
        if copy is None:
            return shipped, None
        return copy, (f"The bundled {shipped.name}, served from an F16 copy: on a CPU, batched "
                      "Q4_1 decoding drifts from decoding alone; F16 keeps a batch's tokens.")
    if str(model) == DEMO_ALIAS and not Path(model).exists():
        progress("writing the random-weight demo model (once)", None)
        return ensure_demo_model(), None
    if str(model) == STANDIN_ALIAS and not Path(model).exists():
        progress("writing the stand-in model (once)", None)
        return ensure_demo_model("tiny", arch="qwen35", n_vocab=QWEN35_VOCAB), None
    return Path(model).expanduser(), None
