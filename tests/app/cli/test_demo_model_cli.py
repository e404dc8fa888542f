"""`swarm-panel demo-model`: the shapes, architectures and types it writes, and the combinations it refuses."""

from __future__ import annotations

import gguf
import pytest

from swarm_panel.app.cli.main import main


def _types(path) -> set[str]:
    return {t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_the_old_size_flag_still_writes_an_f16_llama_file(tmp_path, capsys):
    path = tmp_path / "tiny.gguf"
    assert main(["demo-model", str(path), "--size", "tiny"]) == 0
    assert gguf.GGUFReader(path).get_field("general.architecture").contents() == "llama"
    assert _types(path) == {"F16", "F32"}
    out = capsys.readouterr().out
    assert "F16" in out and "625,280 parameters" in out


@pytest.mark.parametrize("arch", ["llama", "qwen35"])
def test_a_small_shape_is_quantized_on_request_and_its_f16_file_removed(tmp_path, capsys, arch):
    path = tmp_path / "tiny-q.gguf"
    assert main(["demo-model", str(path), "--shape", "tiny", "--arch", arch, "--type", "q4_k_m"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-q.gguf"]
    assert "F16" not in _types(path)
    captured = capsys.readouterr()
    assert "Q4_K_M" in captured.out and "parameters" in captured.out
    assert "quantizing" in captured.err


def test_the_9b_shape_needs_the_qwen35_architecture(tmp_path, capsys):
    assert main(["demo-model", str(tmp_path / "x.gguf"), "--shape", "9b"]) == 2
    assert "--arch qwen35" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_9b_shape_defaults_to_q4_k_m(tmp_path, capsys, monkeypatch):
    from swarm_panel.app.cli import demo_model

    calls = []
    monkeypatch.setattr(demo_model, "write_target_shape_model",
                        lambda path, shape, model_type, seed, progress: calls.append((shape.dim, model_type))
                        or path.write_bytes(b"") or path)
    assert main(["demo-model", str(tmp_path / "9b.gguf"), "--arch", "qwen35", "--shape", "9b"]) == 0
    assert calls == [(4096, "q4_k_m")]
    assert "8,953,803,264 parameters" in capsys.readouterr().out
