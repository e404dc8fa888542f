"""The flash-attention probe: "auto" on a CPU keeps whichever kernel timed faster here, once per CPU and model."""

from __future__ import annotations

import pytest

from runtime import flash_attn_probe as probe
from runtime.flash_attn_probe import MARGIN, decide_flash_attn


def timings(with_it: float, without: float):
    calls: list[str] = []

    def measure(path, extra_buffers, n_threads):
        calls.append(path.name)
        return with_it, without

    measure.calls = calls
    return measure


def decide(tmp_path, model, measure, mode="auto", **how):
    how = {"cpu_only": True, "kv_type": "f16"} | how
    return decide_flash_attn(model, mode, cache_path=tmp_path / "fa.json", measure=measure, **how)


def test_clearly_faster_flash_attention_is_kept_and_remembered(tmp_path, tiny_model_path):
    fast = timings(0.040, 0.050)
    decision = decide(tmp_path, tiny_model_path, fast)
    assert decision.setting == "on" and "40.0 ms with it, 50.0 ms without" in decision.reason
    # A second decision must not time again: a probe saying the opposite would turn it off.
    again = decide(tmp_path, tiny_model_path, timings(0.090, 0.050))
    assert again.setting == "on" and again.reason.endswith("(remembered)")
    assert fast.calls == [tiny_model_path.name]


@pytest.mark.parametrize("with_it, setting", [(0.050, "off"), (0.050 * MARGIN * 1.01, "off"), (0.070, "off"),
                                              (0.050 * MARGIN * 0.99, "on")])
def test_a_tie_keeps_the_plain_path(tmp_path, tiny_model_path, with_it, setting):
    assert decide(tmp_path, tiny_model_path, timings(with_it, 0.050)).setting == setting


def test_another_model_file_is_timed_again(tmp_path, tiny_model_path, tiny_qwen35_model_path):
    measure = timings(0.040, 0.050)
    decide(tmp_path, tiny_model_path, measure)
    decide(tmp_path, tiny_qwen35_model_path, measure)
    assert measure.calls == [tiny_model_path.name, tiny_qwen35_model_path.name]


@pytest.mark.parametrize("mode, how, setting", [
    ("on", {}, "on"), ("off", {}, "off"),
    ("auto", {"cpu_only": False}, "auto"), ("auto", {"kv_type": "q8_0"}, "auto")])
def test_a_setting_offload_or_a_quantized_cache_is_not_timed(tmp_path, tiny_model_path, mode, how, setting):
    measure = timings(0.040, 0.050)
    assert decide(tmp_path, tiny_model_path, measure, mode, **how).setting == setting
    assert measure.calls == []


def test_a_failing_probe_keeps_the_plain_path_and_says_why(tmp_path, tiny_model_path):
    def broken(path, extra_buffers, n_threads):
        raise RuntimeError("no memory")

    decision = decide(tmp_path, tiny_model_path, broken)
    assert decision.setting == "off" and "no memory" in decision.reason


def test_the_real_probe_times_both_kernels_on_both_architectures(arch_model_path):
    with_it, without = probe.time_both(arch_model_path, False, 1)
    assert 0 < with_it < 5 and 0 < without < 5


def test_an_engine_built_from_settings_runs_the_probes_verdict(tmp_path, tiny_model_path, monkeypatch):
    from app.engines import build_engine

    monkeypatch.setattr(probe, "cache_file", lambda: tmp_path / "fa.json")
    monkeypatch.setattr(probe, "time_both", lambda path, extra_buffers, n_threads: (0.030, 0.050))
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512, threads=1,
                          extra_buffers="off")
    try:
        facts = engine.describe()
        assert facts["flash_attn"] == "on" and "30.0 ms with it" in facts["flash_attn_reason"]
    finally:
        engine.close()
    monkeypatch.setattr(probe, "cache_file", lambda: tmp_path / "other.json")
    monkeypatch.setattr(probe, "time_both", lambda path, extra_buffers, n_threads: (0.080, 0.050))
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512, threads=1,
                          extra_buffers="off")
    try:
        assert engine.describe()["flash_attn"] == "off"
    finally:
        engine.close()
