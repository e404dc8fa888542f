"""The flash-attention probe: "auto" on a CPU keeps whichever kernel timed faster here, once per CPU and model."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.engine import engine_meta
from swarm_panel.runtime.llama.cpu_tuning import flash_attn_probe as probe
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import MARGIN, ProbeLayout, decide_flash_attn

SERVING = ProbeLayout(n_ctx=32768, lanes=8, kv_unified=False)


def timings(with_it: float, without: float):
    calls: list[str] = []

    def measure(path, extra_buffers, n_threads, layout):
        calls.append((path.name, str(layout)))
        return with_it, without

    measure.calls = calls
    return measure


def decide(tmp_path, model, measure, mode="auto", layout=SERVING, **how):
    how = {"cpu_only": True, "kv_type": "f16"} | how
    return decide_flash_attn(model, mode, layout, cache_path=tmp_path / "fa.json", measure=measure, **how)


def test_clearly_faster_flash_attention_is_kept_and_remembered(tmp_path, tiny_model_path):
    fast = timings(0.040, 0.050)
    decision = decide(tmp_path, tiny_model_path, fast)
    assert decision.setting == "on" and "40 ms with it, 50 ms without" in decision.reason
    assert ("32 decode steps of 8 lanes over 300 tokens and a 256-token prompt chunk (split KV, 8 lanes of 4096)"
            in decision.reason)
    # A second decision must not time again: a probe saying the opposite would turn it off.
    again = decide(tmp_path, tiny_model_path, timings(0.090, 0.050))
    assert again.setting == "on" and again.reason.endswith("(remembered)")
    assert fast.calls == [(tiny_model_path.name, "split KV, 8 lanes of 4096")]


@pytest.mark.parametrize("with_it, setting", [(0.050, "off"), (0.050 * MARGIN * 1.01, "off"), (0.070, "off"),
                                              (0.050 * MARGIN * 0.99, "on")])
def test_a_tie_keeps_the_plain_path(tmp_path, tiny_model_path, with_it, setting):
    assert decide(tmp_path, tiny_model_path, timings(with_it, 0.050)).setting == setting


def test_another_model_file_is_timed_again(tmp_path, tiny_model_path, tiny_qwen35_model_path):
    measure = timings(0.040, 0.050)
    decide(tmp_path, tiny_model_path, measure)
    decide(tmp_path, tiny_qwen35_model_path, measure)
    assert [name for name, _ in measure.calls] == [tiny_model_path.name, tiny_qwen35_model_path.name]


def test_another_layout_is_timed_again(tmp_path, tiny_model_path):
    """The plain path's step grows with a split stream's cells: a verdict holds for its layout only."""
    measure = timings(0.040, 0.050)
    layouts = [SERVING, ProbeLayout(8192, 2, False), ProbeLayout(32768, 8, True), SERVING]
    for layout in layouts:
        decide(tmp_path, tiny_model_path, measure, layout=layout)
    assert [layout for _, layout in measure.calls] == ["split KV, 8 lanes of 4096", "split KV, 2 lanes of 4096",
                                                       "unified KV of 32768"]


def test_a_small_split_stream_is_probed_within_its_share():
    small = ProbeLayout(1024, 4, False)
    assert (small.rows, small.context, small.chunk) == (4, 121, 121)
    assert small.context + small.chunk + probe.STEPS < 1024 // 4
    served = ProbeLayout(32768, 64, True)
    assert (served.rows, served.context, served.chunk) == (8, 300, 256)


@pytest.mark.parametrize("mode, how, setting", [
    ("on", {}, "on"), ("off", {}, "off"),
    ("auto", {"cpu_only": False}, "auto"), ("auto", {"kv_type": "q8_0"}, "auto")])
def test_a_setting_offload_or_a_quantized_cache_is_not_timed(tmp_path, tiny_model_path, mode, how, setting):
    measure = timings(0.040, 0.050)
    assert decide(tmp_path, tiny_model_path, measure, mode, **how).setting == setting
    assert measure.calls == []


def test_a_failing_probe_keeps_the_plain_path_and_says_why(tmp_path, tiny_model_path):
    def broken(path, extra_buffers, n_threads, layout):
        raise RuntimeError("no memory")

    decision = decide(tmp_path, tiny_model_path, broken)
    assert decision.setting == "off" and "no memory" in decision.reason


def test_the_real_probe_times_both_kernels_on_both_architectures(arch_model_path):
    for layout in (ProbeLayout(4096, 8, False), ProbeLayout(4096, 8, True)):
        with_it, without = probe.time_both(arch_model_path, False, 1, layout)
        assert 0 < with_it < 5 and 0 < without < 5


def test_an_engine_built_from_settings_runs_the_probes_verdict(tmp_path, tiny_model_path, monkeypatch):
    from swarm_panel.app.service.engine_factory import build_engine

    monkeypatch.setattr(probe, "cache_file", lambda: tmp_path / "fa.json")
    monkeypatch.setattr(probe, "time_both", lambda path, extra_buffers, n_threads, layout: (0.030, 0.050))
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512, threads=1,
                          extra_buffers="off")
    try:
        facts = engine_meta(engine)
        assert facts["flash_attn"] == "on" and "30 ms with it" in facts["flash_attn_reason"]
    finally:
        engine.close()
    monkeypatch.setattr(probe, "cache_file", lambda: tmp_path / "other.json")
    monkeypatch.setattr(probe, "time_both", lambda path, extra_buffers, n_threads, layout: (0.080, 0.050))
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512, threads=1,
                          extra_buffers="off")
    try:
        assert engine.facts.flash_attn == "off"
    finally:
        engine.close()


def test_an_older_verdict_without_a_layout_is_timed_again(tmp_path, tiny_model_path):
    import json

    from swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe import machine_key, model_key

    old = {machine_key(): {model_key(tiny_model_path): {"setting": "off", "reason": "off: a tie"}}}
    (tmp_path / "fa.json").write_text(json.dumps(old))
    measure = timings(0.040, 0.050)
    assert decide(tmp_path, tiny_model_path, measure).setting == "on" and len(measure.calls) == 1
    assert decide(tmp_path, tiny_model_path, measure).reason.endswith("(remembered)")


def test_a_model_too_large_to_time_quickly_keeps_the_plain_path_untimed(tmp_path):
    """A 9B Q4_K_M's probe ran past 14 minutes on 2 cores: a user waiting for the first load would
    see a hang. Past the limit nothing is timed and the reason says so."""
    big = tmp_path / "big.gguf"
    with big.open("wb") as f:
        f.truncate(probe.PROBE_MAX_MODEL_BYTES + 1)
    fast = timings(0.010, 0.050)
    decision = decide(tmp_path, big, fast)
    assert decision.setting == "off" and "not timed" in decision.reason
    assert fast.calls == []


def test_the_real_probe_reports_its_share_done_engine_by_engine(tmp_path, tiny_model_path):
    shares: list[float] = []
    layout = ProbeLayout(4096, 8, True)  # unified: no curve is timed, the kernels' rounds alone
    decide_flash_attn(tiny_model_path, "auto", layout, cpu_only=True, kv_type="f16", n_threads=1,
                      cache_path=tmp_path / "fa.json", progress=shares.append)
    assert shares[0] == 0.0 and shares[-1] == 1.0
    assert len(shares) == 2 * probe.ROUNDS + 1 and shares == sorted(set(shares))
    # Remembered: nothing timed, nothing to count.
    again: list[float] = []
    decide_flash_attn(tiny_model_path, "auto", layout, cpu_only=True, kv_type="f16", n_threads=1,
                      cache_path=tmp_path / "fa.json", progress=again.append)
    assert again == []
