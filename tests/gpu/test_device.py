"""What the engine says about the device it offloads to: the device and its memory, where sampling in the graph
runs and why, and a model or context too big for the device refused before anything loads."""

from __future__ import annotations

import pytest

from swarm_panel.app.service.engine_factory import build_engine
from swarm_panel.runtime.core.engine import engine_meta
from swarm_panel.runtime.llama.backend_sampling import software
from swarm_panel.runtime.llama.devices import offload_devices
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.llama.model import ModelLoadError

pytestmark = pytest.mark.gpu


def test_the_engine_names_the_device_and_its_memory(tiny_model_path, _offloaded):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=512) as engine:
        facts = engine_meta(engine)
        assert engine.computes_async and facts["n_gpu_layers"] == -1
    assert facts["device"].startswith(f"{_offloaded.name}: {_offloaded.description}")
    assert _offloaded.total_bytes > 0 and 0 < _offloaded.free_bytes <= _offloaded.total_bytes


def test_auto_puts_sampling_in_the_graph_where_it_holds_and_says_why(tiny_model_path, _offloaded):
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512)
    try:
        facts = engine_meta(engine)
    finally:
        engine.close()
    if software(_offloaded):
        assert facts["backend_sampling"] is False
        assert facts["backend_sampling_reason"].startswith(f"off on {_offloaded.description}, a device that runs on")
    else:
        assert facts["backend_sampling"] is True and _offloaded.backend in facts["backend_sampling_reason"]


def test_a_context_too_big_for_the_device_is_refused_before_loading(tiny_model_path, _offloaded):
    # Far more KV than a test device holds: 16 Mi tokens of the tiny model's f16 KV (1 KiB a token) is 16 GiB.
    with pytest.raises(ModelLoadError, match=rf"more than the [\d.]+ GiB free on {_offloaded.name}"):
        LlamaEngine(tiny_model_path, max_lanes=8, n_ctx=1 << 24)


def test_the_plan_reads_the_devices_memory(tiny_model_path, _offloaded):
    from swarm_panel.app.service.plan_report import device_memory
    from swarm_panel.app.settings.schema import Settings

    assert device_memory(Settings(model=tiny_model_path)) == offload_devices()[0].free_bytes


def test_a_vulkan_build_without_a_device_runs_on_the_cpu_and_says_so_once(tiny_model_path, _offloaded):
    """lavapipe is a device of CPU type, which ggml skips unless it is named: without the name, this Vulkan build
    sees no device, as on a machine with no Vulkan driver."""
    import os
    import subprocess
    import sys

    if _offloaded.backend != "Vulkan" or os.environ.get("GGML_VK_VISIBLE_DEVICES") is None:
        pytest.skip("needs a Vulkan build whose only device is named by GGML_VK_VISIBLE_DEVICES")
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    script = ("import logging; logging.basicConfig(format='%(levelname)s %(message)s')\n"
              "from swarm_panel.runtime.llama.engine import LlamaEngine\n"
              f"with LlamaEngine({str(tiny_model_path)!r}, max_lanes=2, n_ctx=512, n_gpu_layers=-1) as e:\n"
              "    print('device:', e.facts.device, e.computes_async)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "device: CPU (this Vulkan build found no device) False" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING this llama.cpp is built for Vulkan but found no Vulkan device: every layer runs on "
                        "the CPU"]
