"""Whether requests' sampler chains run inside the compute graph (llama.cpp's backend sampling), and why.

On a CPU it does not pay (docs/gpu.md, "Sampling in the graph"). On Vulkan, llama.cpp at the vendored
commit crashes when a backend sampler is attached between two decodes (docs/gpu.md, "The Vulkan crash";
benchmarks/vulkan_sampler_crash.py reproduces it with llama-cpp-python's API alone), which an engine
serving agents does every time a request starts, so `auto` keeps it off there. Other GPU backends
(CUDA, ROCm, Metal) get it: nothing has shown them crashing, though no card has stressed them yet.
"""

from __future__ import annotations

import logging

from swarm_panel.runtime.llama.devices import offload_devices

log = logging.getLogger(__name__)

# Backends where attaching a backend sampler between decodes corrupts the heap (docs/gpu.md).
CRASHING_BACKENDS = ("Vulkan",)
VULKAN_CRASH = ("llama.cpp's Vulkan backend crashes when a sampler is attached between decodes "
                "(docs/gpu.md, 'The Vulkan crash')")


def choose_backend_sampling(setting: str, offloads: bool) -> tuple[bool, str]:
    """(on, why) for the `backend_sampling` setting ('auto', 'on', 'off'), where layers are offloaded or not."""
    if setting == "off":
        return False, "off: as asked"
    backends = sorted({device.backend for device in offload_devices()}) if offloads else []
    crashing = [name for name in backends if name in CRASHING_BACKENDS]
    if setting == "on":
        if crashing:
            log.warning("sampling in the graph is on as asked, on %s, where %s", ", ".join(crashing), VULKAN_CRASH)
            return True, f"on: as asked, though {VULKAN_CRASH}"
        return True, "on: as asked"
    if not offloads:
        return False, "off: on a CPU the graph's samplers cost more than the logits' copy"
    if crashing:
        log.warning("sampling in the graph is off on %s: %s", ", ".join(crashing), VULKAN_CRASH)
        return False, f"off on {', '.join(crashing)}: {VULKAN_CRASH}"
    return True, f"on: layers offloaded to {', '.join(backends) or 'the GPU'}"
