"""Sampling in the graph on the device: the same greedy tokens as the host path, a seeded draw that repeats,
draws that pass the chi-square test (tests/runtime/llama/test_backend_sampling.py, offloaded). Where llama.cpp's
backend crashes with it (runtime.llama.backend_sampling), it stays off and these skip, saying why."""

import pytest

from swarm_panel.runtime.llama.backend_sampling import CRASHING_BACKENDS
from swarm_panel.runtime.llama.devices import offload_devices

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_backend_sampling import *

_backends = {device.backend for device in offload_devices()}
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    bool(_backends & set(CRASHING_BACKENDS)),
    reason=f"sampling in the graph stays off on {', '.join(sorted(_backends))}: llama.cpp crashes when a sampler "
           "is attached between decodes (docs/gpu.md, benchmarks/vulkan_sampler_crash.py)")]
