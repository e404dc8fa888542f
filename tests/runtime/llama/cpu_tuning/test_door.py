"""CPU tuning's one door: an engine whose weights are offloaded starts no CPU probe and runs none of
the CPU mechanisms; on a CPU the door asks the probes."""

from __future__ import annotations

import subprocess

import llama_cpp
import pytest

from swarm_panel.app.service.engine_factory import build_engine
from swarm_panel.runtime.core.engine import engine_meta
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning import door, extra_buffers_probe, flash_attn_probe
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import ProbeLayout
from tests.runtime.llama.test_llama_engine import run


def _no_probe(*args, **kwargs):
    raise AssertionError("a CPU probe ran for an offloaded engine")


@pytest.fixture
def offloading_build(monkeypatch):
    """This CPU build accepts n_gpu_layers and keeps the weights on the CPU; told that the build
    offloads, the engine takes the path a GPU build takes. Any probe, or any child process, fails the test."""
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)
    monkeypatch.setattr(door, "decide_extra_buffers", _no_probe)
    monkeypatch.setattr(door, "decide_flash_attn", _no_probe)
    monkeypatch.setattr(extra_buffers_probe, "_run_probe", _no_probe)
    monkeypatch.setattr(flash_attn_probe, "time_both", _no_probe)
    monkeypatch.setattr(flash_attn_probe, "time_curve", _no_probe)
    monkeypatch.setattr(subprocess, "Popen", _no_probe)


def test_an_offloaded_engine_starts_no_probe_and_runs_no_cpu_mechanism(offloading_build, arch_model_path):
    engine = build_engine("llama", realtime=True, max_lanes=2, model=arch_model_path, n_ctx=1024, n_gpu_layers=-1)
    try:
        facts = engine_meta(engine)
        assert "no CPU probe" in facts["extra_buffers_reason"] and "no CPU probe" in facts["flash_attn_reason"]
        assert facts["threads_follow_contention"] is False
        assert engine.call_cost is None and engine.caps.attention is None
        assert engine.caps.attention_bound_prefill is False
        requests = [Request(engine.tokenizer.tokenize(p), SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
                    for p in ("hello world", "the agent can call a tool")]
        run(engine, requests)
        assert all(len(r.output_token_ids) == 8 for r in requests)
    finally:
        engine.close()


def test_offloaded_settings_go_to_llama_cpp_as_given(offloading_build, tmp_path):
    layout = ProbeLayout(4096, 8, False)
    auto = door.engine_tuning(tmp_path / "m.gguf", offloaded=True, extra_buffers="auto", flash_attn="auto",
                              layout=layout, kv_type="f16", n_threads=None)
    assert (auto.extra_buffers, auto.flash_attn, auto.attention_curve) == (True, "auto", None)
    chosen = door.engine_tuning(tmp_path / "m.gguf", offloaded=True, extra_buffers="off", flash_attn="on",
                                layout=layout, kv_type="q8_0", n_threads=None)
    assert (chosen.extra_buffers, chosen.flash_attn) == (False, "on")


def test_on_a_cpu_the_door_asks_both_probes(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(door, "decide_extra_buffers",
                        lambda path, mode: asked.append("extra") or extra_buffers_probe.ExtraBuffersDecision(True, "ok"))
    monkeypatch.setattr(door, "decide_flash_attn",
                        lambda *a, **k: asked.append("flash") or flash_attn_probe.FlashAttnDecision("on", "faster"))
    tuning = door.engine_tuning(tmp_path / "m.gguf", offloaded=False, extra_buffers="auto", flash_attn="auto",
                                layout=ProbeLayout(4096, 8, False), kv_type="f16", n_threads=None)
    assert asked == ["extra", "flash"] and (tuning.extra_buffers, tuning.flash_attn) == (True, "on")


def test_default_settings_offload_on_a_gpu_build(offloading_build, arch_model_path):
    """A user with a card expects the weights on it without a flag."""
    from swarm_panel.app.service.engine_factory import resolve_model
    from swarm_panel.app.settings.schema import Settings

    settings = Settings()
    assert settings.n_gpu_layers == -1
    engine = build_engine("llama", realtime=True, max_lanes=2, model=arch_model_path, n_ctx=1024,
                          n_gpu_layers=settings.n_gpu_layers)
    try:
        assert engine.facts.device == "GPU" and engine.call_cost is None
    finally:
        engine.close()
    # The bundled model goes to the card as shipped, not as the F16 copy made for CPUs.
    path, note = resolve_model(None, settings.n_gpu_layers)
    assert path.suffix == ".gguf" and "F16" not in path.name and note is None


def test_default_settings_on_a_cpu_build_keep_the_cpu_tuning(arch_model_path):
    """The same default on this CPU-only build: the weights stay on the CPU and the CPU mechanisms run."""
    from swarm_panel.app.settings.schema import Settings

    assert not llama_cpp.llama_supports_gpu_offload()
    engine = build_engine("llama", realtime=True, max_lanes=2, model=arch_model_path, n_ctx=1024,
                          n_gpu_layers=Settings().n_gpu_layers, kv_unified=False)
    try:
        assert engine.facts.device == "CPU" and engine.call_cost is not None
    finally:
        engine.close()
