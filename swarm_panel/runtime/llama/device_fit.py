"""Whether a model and its context fit in the offload device's memory, asked before llama.cpp loads anything.

A card that runs out of memory mid-load fails deep inside llama.cpp (or its driver) with a message about a
buffer; the memory plan (runtime.planning) says the same thing first, in the user's terms.
"""

from __future__ import annotations

from pathlib import Path

from swarm_panel.runtime.llama.devices import offload_devices
from swarm_panel.runtime.planning.memory_plan import GIB, PlanSettings, plan_memory
from swarm_panel.runtime.planning.shape import read_shape


def device_shortfall(path: Path, settings: PlanSettings) -> str | None:
    """Why these settings cannot fit on the first offload device when every layer goes there; None where
    they fit, where there is no device, or where the header cannot be planned (llama.cpp then decides)."""
    devices = offload_devices()
    if not devices:
        return None
    try:
        shape = read_shape(path)
    except ValueError:
        return None
    device = devices[0]
    plan = plan_memory(shape, settings)
    if plan.device_total <= device.free_bytes:
        return None
    parts = ", ".join(f"{name} {size / GIB:.2f}" for name, size, _ in plan.rows() if size)
    return (f"{path.name} with {settings.lanes} lanes x {settings.context:,} tokens ({settings.kv_type} KV) needs "
            f"{plan.device_total / GIB:.2f} GiB ({parts} GiB), more than the {device.free_bytes / GIB:.2f} GiB free "
            f"on {device.name} ({device.description}): fewer lanes, a shorter context, a smaller KV type, or "
            "--n-gpu-layers to keep some layers on the CPU")
