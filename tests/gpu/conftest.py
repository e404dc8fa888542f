"""The `gpu` suite: what differs when layers are offloaded, run where llama.cpp sees a device.

CI's GPU lane (.ci/run, then .ci/vulkan_lane) runs it on a Vulkan build over Mesa's lavapipe; on a card,
`python -m pytest -m gpu` in a GPU build's environment runs the same (docs/gpu.md). Every LlamaEngine built
here offloads every layer by default, so the engine tests imported from the CPU suite run on the device.
Without a device the suite skips, unless SWARM_PANEL_REQUIRE_GPU is set (the lane sets it): then it fails.
"""

from __future__ import annotations

import os

import llama_cpp
import pytest

from swarm_panel.runtime.llama.devices import offload_devices
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.models.demo import write_demo_model
from swarm_panel.runtime.models.target_shape import quantize
from tests import fresh_tokens

# Nats below a fresh computation's best that a device's greedy token may lie. A step of another shape moves a
# request's logprobs against each other by rounding: on lavapipe up to 0.39 for the tiny qwen35 (batched with
# reuse off as with it on), 0.001 for the tiny llama; a wrong state leaves few of the best tokens shared (docs/gpu.md,
# "Batch size and greedy tokens"). test_fresh_tokens_on_device measures those shifts against this bound.
DEVICE_NEAR_TIE = 0.75


def _device_missing() -> str | None:
    if not llama_cpp.llama_supports_gpu_offload():
        return "this llama-cpp-python offloads to no device (a CPU build, or no device of its backend)"
    if not offload_devices():
        return "llama.cpp found no GPU device"
    return None


@pytest.fixture(scope="session", autouse=True)
def _offloaded():
    missing = _device_missing()
    if missing:
        if os.environ.get("SWARM_PANEL_REQUIRE_GPU"):
            pytest.fail(f"SWARM_PANEL_REQUIRE_GPU is set but {missing}", pytrace=False)
        pytest.skip(missing)
    defaults = LlamaEngine.__init__.__kwdefaults__
    saved = dict(defaults)
    defaults["n_gpu_layers"] = -1
    # A device's kernels change with the step's size: greedy tokens against a fresh computation may part at
    # near-ties there (tests/fresh_tokens.py).
    fresh_tokens.NEAR_TIE = DEVICE_NEAR_TIE
    yield offload_devices()[0]
    fresh_tokens.NEAR_TIE = None
    defaults.clear()
    defaults.update(saved)


# The tiny models in Q8_0 rather than the CPU suite's F16. lavapipe's LLVM 15 (Debian 12, and Mesa 25 from its
# backports) takes more than 6 minutes to compile ggml's shaders for a step of 8 rows of F16 weights, and about
# a minute for the same step in Q8_0 or Q4_1, once per machine (Mesa keeps them in its disk cache): docs/gpu.md,
# "Shader compiles on lavapipe". A card's users run quantized weights too.
def _tiny_q8_0(tmp_path_factory, name: str, **arch) -> str:
    folder = tmp_path_factory.mktemp("models")
    f16 = write_demo_model(folder / f"{name}-f16.gguf", "tiny", **arch)
    quantize(f16, folder / f"{name}.gguf", "q8_0")
    return str(folder / f"{name}.gguf")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    return _tiny_q8_0(tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def tiny_qwen35_model_path(tmp_path_factory):
    return _tiny_q8_0(tmp_path_factory, "tiny-qwen35", arch="qwen35")
