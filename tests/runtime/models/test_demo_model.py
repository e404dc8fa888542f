"""The random-weight demo model files."""

from __future__ import annotations

import os

import gguf
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from swarm_panel.runtime.core.engine import engine_meta
from swarm_panel.runtime.models import demo as demo_model
from swarm_panel.runtime.models.demo import (
    CHAT_TEMPLATE,
    MODEL_NAME,
    default_demo_model_path,
    ensure_demo_model,
    write_demo_model,
)


def _field(reader: gguf.GGUFReader, key: str):
    return reader.get_field(key).contents()


def test_tiny_model_is_small_with_the_expected_metadata(tiny_model_path):
    assert 500_000 < os.path.getsize(tiny_model_path) < 8_000_000
    reader = gguf.GGUFReader(tiny_model_path)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "general.name") == MODEL_NAME
    assert _field(reader, "llama.context_length") == 2048
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert _field(reader, "tokenizer.chat_template") == CHAT_TEMPLATE
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert 300 <= len(tokens) <= 500
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert "<0x00>" in tokens and "<0xFF>" in tokens and "▁the" in tokens
    assert (_field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")) == (1, 2)
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_writing_is_deterministic_per_seed(tmp_path):
    a = write_demo_model(tmp_path / "a.gguf", "tiny", seed=1).read_bytes()
    b = write_demo_model(tmp_path / "b.gguf", "tiny", seed=1).read_bytes()
    c = write_demo_model(tmp_path / "c.gguf", "tiny", seed=2).read_bytes()
    assert a == b != c


def test_unknown_size_is_refused(tmp_path):
    with pytest.raises(ValueError, match="size"):
        write_demo_model(tmp_path / "x.gguf", "huge")  # type: ignore[arg-type]


def test_ensure_demo_model_writes_once_and_reuses(tmp_path, monkeypatch):
    calls = []
    real = demo_model.write_demo_model
    monkeypatch.setattr(demo_model, "write_demo_model",
                        lambda path, size, arch, n_vocab: calls.append((size, arch)) or real(path, size, arch=arch,
                                                                                          n_vocab=n_vocab))
    target = tmp_path / "sub" / "model.gguf"
    assert ensure_demo_model("tiny", target) == target
    assert ensure_demo_model("tiny", target) == target
    assert calls == [("tiny", "llama")]
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf"]
    hybrid = ensure_demo_model("tiny", tmp_path / "hybrid.gguf", arch="qwen35")
    assert calls[-1] == ("tiny", "qwen35") and hybrid.is_file()


def test_a_padded_vocabulary_gives_the_stand_in_its_logits_size(tmp_path):
    """The CPU stand-in for a card (Qwen3.5's 248,320 tokens, runtime.models.demo.QWEN35_VOCAB) at a test's size."""
    from swarm_panel.runtime.llama.engine import LlamaEngine

    path = write_demo_model(tmp_path / "wide.gguf", "tiny", arch="qwen35", n_vocab=6000)
    with LlamaEngine(path, max_lanes=1, n_ctx=256) as engine:
        assert engine.vocab.n_tokens == 6000
        assert engine.facts.architecture == "qwen35"
    assert default_demo_model_path("tiny", "qwen35", 6000).name.endswith("-vocab6000.gguf")


def test_default_path_is_in_the_user_data_folder():
    path = default_demo_model_path()
    assert path.name == "demo-model.gguf"
    assert path.parent.name == "swarm-panel"
    assert default_demo_model_path("tiny", "qwen35").name == "demo-model-tiny-qwen35.gguf"


def test_chat_template_renders_tool_calls_and_results():
    render = Jinja2ChatFormatter(CHAT_TEMPLATE, eos_token="</s>", bos_token="<s>")
    messages = [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
        ]},
        {"role": "tool", "tool_call_id": "1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "2", "content": "b.py"},
    ]
    prompt = render(messages=messages).prompt
    assert prompt == (
        "<|im_start|>user\nlist files<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response>\n<tool_response>\nb.py\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.slow
def test_demo_model_has_over_100m_parameters(tmp_path):
    from swarm_panel.runtime.llama.engine import LlamaEngine

    path = write_demo_model(tmp_path / "demo.gguf", "demo")
    with LlamaEngine(path, max_lanes=1, n_ctx=256, n_batch=64) as engine:
        facts = engine_meta(engine)
    assert facts["n_params"] >= 100_000_000
    assert facts["context_length_train"] == 4096
    assert facts["file_type"] == "F16"
