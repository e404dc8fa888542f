"""What the engine says about the device it offloads to: the device and its memory, where sampling in the graph
runs and why, and a model or context too big for the device refused before anything loads."""

from __future__ import annotations

import pytest

from swarm_panel.app.service.engine_factory import build_engine
from swarm_panel.runtime.llama.backend_sampling import CRASHING_BACKENDS
from swarm_panel.runtime.llama.devices import offload_devices
from swarm_panel.runtime.llama.engine import LlamaEngine, ModelLoadError

pytestmark = pytest.mark.gpu


def test_the_engine_names_the_device_and_its_memory(tiny_model_path, _offloaded):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=512) as engine:
        facts = engine.describe()
        assert engine.computes_async and facts["n_gpu_layers"] == -1
    assert facts["device"].startswith(f"{_offloaded.name}: {_offloaded.description}")
    assert _offloaded.total_bytes > 0 and 0 < _offloaded.free_bytes <= _offloaded.total_bytes


def test_auto_puts_sampling_in_the_graph_where_it_holds_and_says_why(tiny_model_path, _offloaded):
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512)
    try:
        facts = engine.describe()
    finally:
        engine.close()
    if _offloaded.backend in CRASHING_BACKENDS:
        assert facts["backend_sampling"] is False
        assert facts["backend_sampling_reason"].startswith(f"off on {_offloaded.backend}: ")
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
