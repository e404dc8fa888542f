"""Engine settings reach the engine from flags and Settings alike."""

from __future__ import annotations

from swarm_panel.app.cli.main import build_parser
from swarm_panel.app.cli.serve import settings_from_args
from swarm_panel.app.service.engine_factory import engine_for
from swarm_panel.runtime.core.engine import engine_meta


def test_serve_flags_reach_the_hybrid_engine(tiny_qwen35_model_path, monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    args = build_parser().parse_args(["serve", "--model", str(tiny_qwen35_model_path), "--threads", "1",
                                      "--checkpoint-budget-mb", "3", "--extra-buffers", "off", "--n-ctx", "1024"])
    settings = settings_from_args(args)
    engine = engine_for(settings, realtime=True, max_lanes=2)
    try:
        facts = engine_meta(engine)
        assert facts["memory_kind"] == "hybrid"
        assert facts["checkpoint_budget_bytes"] == 3 << 20
        assert facts["n_threads"] == 1 and facts["extra_buffers"] is False
        assert facts["extra_buffers_reason"] == "off by setting"
    finally:
        engine.close()


def test_bench_flags_carry_the_same_fields():
    args = build_parser().parse_args(["bench", "--engine", "llama", "--checkpoint-budget-mb", "8",
                                      "--extra-buffers", "on", "--threads", "2"])
    assert (args.checkpoint_budget_mb, args.extra_buffers, args.threads) == (8, "on", 2)


def test_the_default_layout_and_attention_follow_the_lane_share_and_the_device(tiny_model_path, monkeypatch,
                                                                                tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    layouts = {}
    attention = {}
    for lanes, n_ctx in ((4, 16384), (4, 8192), (8, 32768), (16, 32768), (4, 16384)):
        args = build_parser().parse_args(["serve", "--model", str(tiny_model_path), "--threads", "1",
                                          "--extra-buffers", "off", "--n-ctx", str(n_ctx)])
        engine = engine_for(settings_from_args(args), realtime=True, max_lanes=lanes)
        try:
            facts = engine_meta(engine)
            layouts[lanes, n_ctx] = facts["kv_unified"]
            # This build has no GPU: flash attention is what the probe timed faster on this CPU, in this
            # layout, timed once per layout.
            assert facts["flash_attn"] in ("on", "off") and facts["device"] == "CPU"
            attention.setdefault((lanes, n_ctx), []).append((facts["flash_attn"], facts["flash_attn_reason"]))
        finally:
            engine.close()
    # Split once every lane gets 4,096 tokens of the context, unified below that.
    assert layouts == {(4, 16384): False, (4, 8192): True, (8, 32768): False, (16, 32768): True}
    assert all(f"lanes of {n_ctx // lanes})" in reason or "unified KV" in reason or "remembered" in reason
               for (lanes, n_ctx), runs in attention.items() for _, reason in runs)
    first, again = attention[4, 16384]
    assert again == (first[0], first[1].removesuffix(" (remembered)") + " (remembered)")


def test_flash_attention_stays_as_asked_where_auto_does_not_mean_off():
    from swarm_panel.runtime.llama.context import resolve_flash_attn

    assert resolve_flash_attn("auto", 0, "f16") == "off"
    # A quantized V cache needs flash attention: llama.cpp decides.
    assert resolve_flash_attn("auto", 0, "q8_0") == "auto"
    assert resolve_flash_attn("on", 0, "f16") == "on"
