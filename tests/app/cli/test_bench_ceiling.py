"""`swarm-panel bench --ceiling`: the modeled card's ceiling against context, per KV type (arithmetic, no run)."""

import json

import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.planning.memory_plan import KV_TYPES, PlanSettings, plan_memory


def test_the_ceiling_table_sags_with_context_and_quantized_kv_holds_it_up(capsys):
    assert main(["bench", "--ceiling", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ceilings = out["ceilings"]
    assert list(ceilings) == list(KV_TYPES)
    contexts = [c["context"] for c in ceilings["f16"]]
    assert contexts == [CARD.reference_context, 1024, 4096, 8192, 16384, 32768, 65536]
    for kv, row in ceilings.items():
        tok_s = [c["tok_s"] for c in row]
        assert tok_s == sorted(tok_s, reverse=True), kv
        for c in row:
            # The lanes printed fit in the card per the memory plan.
            assert plan_memory(CARD.shape, PlanSettings(lanes=c["lanes"], context=c["context"], kv_type=kv,
                                                        flash_attn=True),
                               device_bytes=CARD.device_bytes, reserve=CARD.reserve_bytes).fits
    long = {kv: ceilings[kv][-1]["tok_s"] for kv in KV_TYPES}
    assert long["q4_0"] >= long["q8_0"] >= long["f16"]
    # At the reference context the f16 ceiling is the seed's line at those lanes.
    first = ceilings["f16"][0]
    assert first["tok_s"] == pytest.approx(first["lanes"] / (16.9 + 1.1 * first["lanes"]) * 1e3)


def test_the_ceiling_table_prints_each_context_and_caps_lanes_at_num_lanes(capsys):
    assert main(["bench", "--ceiling", "--num-lanes", "8", "--ceiling-contexts", "320,65536"]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["320", "65,536"]
    # context, then tok/s and lanes for f16, q8_0, q4_0: the seed's 311 at its context and 8 lanes.
    assert rows[0][1:3] == ["311.3", "8"]
    assert int(rows[1][2]) < 8 and all(int(lanes) <= 8 for lanes in rows[1][2::2])
    assert "16.9 + 1.1B at 320 tokens of f16 KV" in text


def test_the_ceiling_is_the_modeled_cards_only(capsys):
    assert main(["bench", "--ceiling", "--engine", "llama"]) == 2
    assert "--engine modeled" in capsys.readouterr().err
