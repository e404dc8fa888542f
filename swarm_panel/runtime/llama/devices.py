"""The devices this llama.cpp build can offload to, and their memory, read from ggml's backend registry.

llama-cpp-python binds no `ggml_backend_dev_*` call, so they are bound here on the loaded libggml. A
device's memory is what its driver reports before anything is loaded: a card's VRAM, or for Mesa's
lavapipe (a Vulkan device that runs on the CPU) the heap it advertises.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import llama_cpp
from llama_cpp import _ggml

from swarm_panel.runtime.llama.model import ensure_backend, on_cpu

# enum ggml_backend_dev_type (ggml-backend.h)
_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_OFFLOAD_KINDS = ("gpu", "igpu")


@dataclass(frozen=True, slots=True)
class Device:
    name: str  # ggml's name, e.g. "Vulkan0" or "CUDA0"
    backend: str  # its backend's, e.g. "Vulkan", "CUDA", "ROCm", "Metal"
    description: str  # the driver's, e.g. "AMD Radeon RX 9070 XT (RADV GFX1201)"
    kind: str
    free_bytes: int
    total_bytes: int

    def line(self) -> str:
        gib = 1 << 30
        return (f"{self.name}: {self.description}, {self.free_bytes / gib:.1f} of {self.total_bytes / gib:.1f} GiB "
                "free")


@cache
def _lib() -> ctypes.CDLL:
    lib = _ggml.libggml
    dev = ctypes.c_void_p
    for name, args, result in (
        ("ggml_backend_dev_count", [], ctypes.c_size_t),
        ("ggml_backend_dev_get", [ctypes.c_size_t], dev),
        ("ggml_backend_dev_name", [dev], ctypes.c_char_p),
        ("ggml_backend_dev_description", [dev], ctypes.c_char_p),
        ("ggml_backend_dev_type", [dev], ctypes.c_int),
        ("ggml_backend_dev_memory", [dev, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)], None),
        ("ggml_backend_dev_backend_reg", [dev], dev),
        ("ggml_backend_reg_count", [], ctypes.c_size_t),
        ("ggml_backend_reg_get", [ctypes.c_size_t], dev),
        ("ggml_backend_reg_name", [dev], ctypes.c_char_p),
        ("ggml_backend_reg_dev_count", [dev], ctypes.c_size_t),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def offload_devices() -> list[Device]:
    """The GPUs (discrete or integrated) llama.cpp sees, in its order; empty for a CPU-only build or a
    GPU build on a machine with no device of its backend."""
    if not llama_cpp.llama_supports_gpu_offload():
        return []
    ensure_backend()
    lib = _lib()
    devices = []
    for index in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(index)
        kind = _KINDS.get(lib.ggml_backend_dev_type(dev), "unknown")
        if kind not in _OFFLOAD_KINDS:
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        backend = lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))
        devices.append(Device(lib.ggml_backend_dev_name(dev).decode(errors="replace"), backend.decode(errors="replace"),
                              lib.ggml_backend_dev_description(dev).decode(errors="replace"),
                              kind, free.value, total.value))
    return devices


def idle_gpu_backends() -> list[str]:
    """GPU backends this build holds that found no device (a Vulkan build on a machine without a Vulkan
    driver, or whose only device is a CPU one): layers asked for then run on the CPU."""
    ensure_backend()
    lib = _lib()
    names = []
    for index in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(index)
        name = lib.ggml_backend_reg_name(reg).decode(errors="replace")
        if name not in ("CPU", "BLAS", "RPC") and lib.ggml_backend_reg_dev_count(reg) == 0:
            names.append(name)
    return names


def device_name(n_gpu_layers: int) -> str:
    if on_cpu(n_gpu_layers):
        idle = idle_gpu_backends()
        return f"CPU (this {', '.join(idle)} build found no device)" if idle else "CPU"
    devices = offload_devices()
    return devices[0].line() if devices else "GPU"
