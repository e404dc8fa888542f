"""`swarm-panel plan`: the target's worked example, the answer both ways, and clear failures."""

import json

import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.app.service.plan_report import parse_size
from swarm_panel.runtime.planning.memory_plan import GIB, PlanSettings, most_lanes, plan_memory
from swarm_panel.runtime.planning.shape import QWEN35_9B


def test_the_targets_worked_example_answers_for_each_kv_type(capsys):
    assert main(["plan", "--model", "qwen3.5-9b", "--vram", "16GiB", "--lanes", "8", "--context", "32768"]) == 0
    out = capsys.readouterr().out
    assert "Qwen3.5-9B" in out and "recurrent states" in out and "fits" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip().split()[:1]
            and line.split()[0] in ("f16", "q8_0", "q4_0")}
    assert set(rows) == {"f16", "q8_0", "q4_0"}
    for kv_type, (lanes, _context) in rows.items():
        expected = most_lanes(QWEN35_9B, 32768, 16 * GIB, reserve=512 << 20, kv_type=kv_type, flash_attn=True)
        assert int(lanes) == expected


def test_a_plan_that_does_not_fit_exits_1_with_the_reason(capsys):
    assert main(["plan", "--model", "qwen3.5-9b", "--vram", "8GiB", "--lanes", "16", "--context", "32768"]) == 1
    assert "does not fit" in capsys.readouterr().out


def test_json_output_matches_the_plan(capsys):
    assert main(["plan", "--model", "qwen3.5-9b", "--vram", "16GiB", "--lanes", "4", "--context", "8192",
                 "--kv-type", "q8_0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = plan_memory(QWEN35_9B, PlanSettings(lanes=4, context=8192, kv_type="q8_0", flash_attn=True))
    assert out["parts"]["KV cache"] == plan.kv and out["device_total"] == plan.device_total and out["fits"]


def test_the_bundled_model_is_planned_from_its_file_by_default(capsys):
    assert main(["plan", "--lanes", "2", "--context", "1024"]) == 0
    out = capsys.readouterr().out
    assert "2 lanes x 1,024 tokens" in out and "weights" in out and "recurrent" not in out


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path, capsys):
    junk = tmp_path / "junk.gguf"
    junk.write_text("hello")
    assert main(["plan", "--model", str(junk)]) == 2
    assert "not a readable GGUF" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "size"), [("16GiB", 16 << 30), ("16G", 16 << 30), ("16GB", 16 * 10**9),
                                            ("512MiB", 512 << 20), ("1024", 1024), ("1.5GiB", 3 << 29)])
def test_sizes_parse(text, size):
    assert parse_size(text) == size


def test_a_bad_size_is_refused():
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
