"""Engine settings reach the engine from flags and Settings alike."""

from __future__ import annotations

from app.cli import build_parser
from app.engines import engine_for
from app.serve import settings_from_args


def test_serve_flags_reach_the_hybrid_engine(tiny_qwen35_model_path, monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    args = build_parser().parse_args(["serve", "--model", str(tiny_qwen35_model_path), "--threads", "1",
                                      "--checkpoint-budget-mb", "3", "--extra-buffers", "off", "--n-ctx", "1024"])
    settings = settings_from_args(args)
    engine = engine_for(settings, realtime=True, max_lanes=2)
    try:
        facts = engine.describe()
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
