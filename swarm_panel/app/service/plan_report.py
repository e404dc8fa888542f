"""The memory plan of what a user is about to load, from their settings, and its report in words.

The shape comes from the GGUF header (no weights read), or, for `qwen3.5-9b`, from the target's
config (runtime.planning.shape.QWEN35_9B), so a user without the file can still ask what fits.
The layout is the one the engine would choose for these settings (runtime.core.config's rule).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from swarm_panel.app.models_hub.choice import is_hub_name
from swarm_panel.app.models_hub.remote_plan import remote_shape
from swarm_panel.app.service.engine_factory import BUNDLED_ALIAS, DEMO_ALIAS
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.core.config import MAX_LANES, auto_kv_unified
from swarm_panel.runtime.models.bundled import bundled_model_path
from swarm_panel.runtime.models.demo import default_demo_model_path
from swarm_panel.runtime.planning.memory_plan import (
    GIB,
    KV_TYPES,
    MemoryPlan,
    PlanSettings,
    longest_context,
    most_lanes,
    plan_memory,
)
from swarm_panel.runtime.planning.shape import QWEN35_9B, ModelShape, read_shape

TARGET_ALIAS = "qwen3.5-9b"
# What a card's driver and runtime keep for themselves beside llama.cpp's buffers (CUDA's context,
# ROCm's): an assumption, stated in the report, that a user can change with --reserve.
DEFAULT_CARD_RESERVE = 512 << 20
_SIZE = re.compile(r"^\s*([\d.]+)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'16GiB', '16G' (binary), '16GB' (decimal), '512MiB', '17179869184' -> bytes."""
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"not a size: {text!r} (try 16GiB or 512MiB)")
    number, unit, binary = found.groups()
    power = "kmgt".find(unit.lower()) + 1 if unit else 0
    decimal = bool(unit) and not binary and text.strip().lower().endswith("b")
    return int(float(number) * (1000 if decimal else 1024) ** power)


def machine_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def model_shape(model: Path | str | None) -> ModelShape:
    """The shape of the model a setting names: a GGUF path, the bundled or demo model, or the target."""
    if model is not None and str(model).lower() == TARGET_ALIAS:
        return QWEN35_9B
    if model is None or str(model) == BUNDLED_ALIAS:
        return read_shape(bundled_model_path())
    if is_hub_name(str(model)):
        return remote_shape(str(model))
    if str(model) == DEMO_ALIAS and not Path(model).exists():
        path = default_demo_model_path()
        if not path.is_file():
            raise ValueError("the demo model is written on first load; load it once, or plan a GGUF file")
        return read_shape(path)
    return read_shape(Path(model).expanduser())


def settings_plan(settings: Settings, *, device_bytes: int | None, reserve: int = 0, context: int | None = None,
                  kv_type: str | None = None, card: bool | None = None, shape: ModelShape | None = None) -> MemoryPlan:
    """The plan for these settings (lanes are num_lanes; context, each lane's, defaults to n_ctx / lanes);
    `card`: plan for offloaded weights (default: where the settings and this build would put them)."""
    shape = shape or model_shape(settings.model)
    lanes = settings.num_lanes
    context = context or max(settings.n_ctx // lanes, 1)
    kv_type = kv_type or settings.kv_type
    card = offloads(settings) if card is None else card
    unified = auto_kv_unified(lanes * context, lanes) if settings.kv_unified is None else settings.kv_unified
    plan_settings = PlanSettings(lanes=lanes, context=context, kv_type=kv_type, n_batch=settings.n_batch,
                                 flash_attn=flash_attn_for(settings.flash_attn, kv_type, card), kv_unified=unified)
    return plan_memory(shape, plan_settings, device_bytes=device_bytes, reserve=reserve,
                       checkpoint_budget=settings.checkpoint_budget_mb << 20,
                       park_budget=settings.park_budget_mb << 20)


def flash_attn_for(setting: str, kv_type: str, card: bool) -> bool:
    """As the engine resolves the setting: a quantized V cache needs flash attention; 'auto' is on for
    a card (llama.cpp's choice on a GPU) and off for an f16 cache on a CPU (the CPU probe's usual
    verdict: see docs/cpu-tuning.md)."""
    if setting != "auto":
        return setting == "on"
    return kv_type != "f16" or card


def offloads(settings: Settings) -> bool:
    """The weights go to a card: layers asked for, and a llama.cpp built with a GPU backend."""
    # Deferred as engine_factory defers it: loading llama.cpp is the engine's first step, not an import's.
    from swarm_panel.runtime.llama.model import on_cpu

    return not on_cpu(settings.n_gpu_layers)


def device_memory(settings: Settings) -> int | None:
    """What the offload device has free, where these settings put the weights on one (None: the CPU's, or a
    device that does not say)."""
    if not offloads(settings):
        return None
    from swarm_panel.runtime.llama.devices import offload_devices

    devices = offload_devices()
    return devices[0].free_bytes if devices and devices[0].free_bytes else None


def report(plan: MemoryPlan) -> list[str]:
    s, shape = plan.settings, plan.shape
    kind = (f"{shape.attention_layers} attention + {shape.recurrent_layers} recurrent layers" if shape.hybrid
            else f"{shape.attention_layers} attention layers")
    lines = [(f"{shape.name} ({shape.arch}: {kind}); {s.lanes} lanes x {s.context:,} tokens, {s.kv_type} KV, "
              f"{'unified' if s.kv_unified else 'split'}, n_batch {s.n_batch}, flash attention "
              f"{'on' if s.flash_attn else 'off'}")]
    lines += [f"  {name:<17}{_gib(size):>10}  {why}" for name, size, why in plan.rows()]
    where = "" if plan.device_bytes is None else f" of {_gib(plan.device_bytes)}"
    reserve = f", {_gib(plan.reserve)} kept for the driver" if plan.reserve else ""
    lines.append(f"  {'on the device':<17}{_gib(plan.device_total):>10}{where}{reserve}")
    host = [f"checkpoints up to {_gib(plan.host_checkpoints)}"] if plan.host_checkpoints else []
    host.append(f"parked sequences up to {_gib(plan.host_parked)}")
    lines.append(f"  {'in host RAM':<17}{'':>10}  " + ", ".join(host))
    lines.append("  fits" if plan.fits else "  does not fit: " + "; ".join(plan.problems))
    return lines


def both_ways(settings: Settings, device_bytes: int, *, reserve: int, lanes: int, context: int,
              shape: ModelShape, card: bool) -> list[str]:
    """For each KV type: the most lanes at `context`, and the longest context at `lanes`."""
    kept = f" ({_gib(reserve)} kept for the driver)" if reserve else ""
    lines = [f"On {_gib(device_bytes)}{kept}:",
             f"  {'KV type':<8}{f'lanes at {context:,} tokens':>24}{f'context at {lanes} lanes':>24}"]
    unified = settings.kv_unified
    for kv_type in KV_TYPES:
        common = {"kv_type": kv_type, "n_batch": settings.n_batch, "flash_attn": flash_attn_for(settings.flash_attn, kv_type, card),
                  "reserve": reserve}
        # llama.cpp's limit on sequence ids; a unified pool spends two per lane (one for its cached sequence).
        n = most_lanes(shape, context, device_bytes, kv_unified=bool(unified), limit=MAX_LANES // (1 + bool(unified)),
                       **common)
        longest = longest_context(shape, lanes, device_bytes, kv_unified=bool(unified), **common)
        lines.append(f"  {kv_type:<8}{n:>24}{f'{longest:,}' if longest else 'none':>24}")
    return lines


def _gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"
