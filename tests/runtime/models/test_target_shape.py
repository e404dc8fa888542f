"""Random-weight files in Qwen3.5-9B's shape: the tensor list and header, the streaming writer, the quantizer."""

from __future__ import annotations

import gguf
import llama_cpp
import pytest

from swarm_panel.runtime.core.engine import Row, RowKind, StepPlan, engine_meta
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.models import target_shape
from swarm_panel.runtime.models.demo import build_vocab, write_demo_model
from swarm_panel.runtime.models.demo_hybrid import HYBRID_SHAPES, HybridShape, TensorSpec, add_hybrid_hparams
from swarm_panel.runtime.models.target_shape import (
    parameter_count,
    target_tensor_specs,
    write_f16_streaming,
    write_target_shape_model,
)

NINE_B = HYBRID_SHAPES["9b"]

# Every matrix dimension a multiple of 256, the K-quants' block: the Q4_K_M recipe applies as on the real
# model instead of falling back to other types, yet quantizing takes a fraction of a second.
SMALL = HybridShape(dim=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_ctx_train=4096,
                    state_size=32, group_count=2, time_step_rank=8, n_vocab=2048)


def test_the_9b_shape_has_the_parameters_of_qwen35_9bs_text_model():
    # https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json ("text_config"), counted the way the
    # checkpoint's tensors are.
    hidden, ff, vocab, layers, interval = 4096, 12288, 248320, 32, 4
    heads, kv_heads, head_dim = 16, 4, 256
    k_heads, v_heads, k_head_dim, v_head_dim, conv_kernel = 16, 32, 128, 128, 4
    embeddings = 2 * vocab * hidden + hidden  # embed_tokens and lm_head (untied), the final norm
    attention = (hidden * heads * head_dim * 2  # q_proj and its output gate (attn_output_gate)
                 + 2 * hidden * kv_heads * head_dim  # k_proj, v_proj
                 + heads * head_dim * hidden  # o_proj
                 + 2 * head_dim)  # q_norm, k_norm
    key, value = k_heads * k_head_dim, v_heads * v_head_dim
    delta_net = (hidden * (2 * key + value)  # in_proj_qkv
                 + hidden * value  # in_proj_z, the output gate
                 + 2 * hidden * v_heads  # in_proj_b, in_proj_a
                 + (2 * key + value) * conv_kernel  # conv1d, no bias
                 + 2 * v_heads  # dt_bias, A_log
                 + v_head_dim  # the gated norm
                 + value * hidden)  # out_proj
    every_layer = 3 * hidden * ff + 2 * hidden  # the MLP, input and post-attention norms
    full = layers // interval
    expected = embeddings + layers * every_layer + full * attention + (layers - full) * delta_net
    assert parameter_count(NINE_B) == expected == 8_953_803_264


def test_the_9b_tensors_have_the_shapes_llama_cpps_qwen35_loader_asks_for():
    # src/models/qwen35.cpp's create_tensor calls, in ggml's order (numpy's reversed).
    ggml = {spec.name: tuple(reversed(spec.shape)) for spec in target_tensor_specs(NINE_B)}
    assert len(ggml) == 3 + 8 * 11 + 24 * 14
    assert ggml["token_embd.weight"] == ggml["output.weight"] == (4096, 248320)
    assert ggml["output_norm.weight"] == (4096,)
    recurrent = {"attn_norm.weight": (4096,), "post_attention_norm.weight": (4096,),
                 "attn_qkv.weight": (4096, 8192), "attn_gate.weight": (4096, 4096), "ssm_conv1d.weight": (4, 8192),
                 "ssm_dt.bias": (32,), "ssm_a": (32,), "ssm_beta.weight": (4096, 32), "ssm_alpha.weight": (4096, 32),
                 "ssm_norm.weight": (128,), "ssm_out.weight": (4096, 4096),
                 "ffn_gate.weight": (4096, 12288), "ffn_up.weight": (4096, 12288), "ffn_down.weight": (12288, 4096)}
    attention = {"attn_norm.weight": (4096,), "post_attention_norm.weight": (4096,),
                 "attn_q.weight": (4096, 8192), "attn_k.weight": (4096, 1024), "attn_v.weight": (4096, 1024),
                 "attn_output.weight": (4096, 4096), "attn_q_norm.weight": (256,), "attn_k_norm.weight": (256,),
                 "ffn_gate.weight": (4096, 12288), "ffn_up.weight": (4096, 12288), "ffn_down.weight": (12288, 4096)}
    for layer in range(32):
        want = attention if layer % 4 == 3 else recurrent
        assert {name.split(".", 2)[2]: shape for name, shape in ggml.items()
                if name.startswith(f"blk.{layer}.")} == want, layer


def test_the_9b_header_says_what_llama_cpps_converter_writes_for_the_real_config(tmp_path):
    writer = gguf.GGUFWriter(tmp_path / "unused.gguf", "qwen35")
    add_hybrid_hparams(writer, NINE_B)
    kv = {key.removeprefix("qwen35."): field.value for key, field in writer.kv_data[0].items()}
    assert kv == {
        "general.architecture": "qwen35", "context_length": 262144, "embedding_length": 4096, "block_count": 32,
        "feed_forward_length": 12288, "attention.head_count": 16, "attention.head_count_kv": 4,
        "attention.key_length": 256, "attention.value_length": 256, "attention.layer_norm_rms_epsilon": 1e-6,
        "rope.freq_base": 1e7, "rope.dimension_count": 64, "rope.dimension_sections": [11, 11, 10, 0],
        "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 16, "ssm.time_step_rank": 32,
        "ssm.inner_size": 4096, "full_attention_interval": 4,
    }


def test_the_vocabulary_is_padded_with_unused_fillers_to_the_asked_size():
    tokens, scores, types = build_vocab(2048)
    natural = len(build_vocab()[0])
    assert len(tokens) == len(scores) == len(types) == 2048
    assert tokens[:natural] == build_vocab()[0]
    assert tokens[natural] == "<|filler_0|>" and tokens[-1] == f"<|filler_{2047 - natural}|>"
    assert set(types[natural:]) == {gguf.TokenType.UNUSED}
    with pytest.raises(ValueError, match="more than"):
        build_vocab(100)


def test_streaming_writes_the_in_memory_writers_bytes_even_a_few_rows_at_a_time(tmp_path, monkeypatch):
    expected = write_demo_model(tmp_path / "in-memory.gguf", "tiny", seed=3, arch="qwen35").read_bytes()
    assert write_f16_streaming(tmp_path / "whole.gguf", HYBRID_SHAPES["tiny"], seed=3).read_bytes() == expected
    monkeypatch.setattr(target_shape, "CHUNK_BYTES", 1000)
    events = []
    path = write_f16_streaming(tmp_path / "rows.gguf", HYBRID_SHAPES["tiny"], seed=3,
                               progress=lambda *event: events.append(event))
    assert path.read_bytes() == expected
    n = len(target_tensor_specs(HYBRID_SHAPES["tiny"]))
    assert events == [("write", done, n) for done in range(n + 1)]


@pytest.fixture(scope="module")
def small_q4_k_m(tmp_path_factory):
    folder = tmp_path_factory.mktemp("q4_k_m")
    events = []
    path = write_target_shape_model(folder / "small.gguf", SMALL, "q4_k_m", progress=lambda *e: events.append(e))
    return path, events


def test_q4_k_m_is_llama_cpps_recipe_and_the_f16_file_is_gone(small_q4_k_m):
    path, events = small_q4_k_m
    assert sorted(p.name for p in path.parent.iterdir()) == ["small.gguf"]
    n = len(target_tensor_specs(SMALL))
    assert events[0] == ("write", 0, n) and ("quantize", 0, 0) in events and events[-1] == ("quantize", n, n)
    reader = gguf.GGUFReader(path)
    assert reader.get_field("general.file_type").contents() == llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert len(reader.get_field("tokenizer.ggml.tokens").contents()) == 2048
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types.keys() == {spec.name for spec in target_tensor_specs(SMALL)}
    q = gguf.GGMLQuantizationType
    assert types["token_embd.weight"] == types["blk.0.ffn_gate.weight"] == q.Q4_K
    assert types["output.weight"] == q.Q6_K
    # Q4_K_M gives some layers' attn_v and ffn_down more bits.
    assert q.Q6_K in {types[f"blk.{i}.ffn_down.weight"] for i in range(SMALL.n_layer)}
    # Norms, biases, decays and the small conv kernel stay F32; every other matrix is a K-quant.
    for spec in target_tensor_specs(SMALL):
        if len(spec.shape) == 1 or spec.name.endswith("ssm_conv1d.weight"):
            assert types[spec.name] == q.F32, spec.name
        else:
            assert types[spec.name] in (q.Q4_K, q.Q5_K, q.Q6_K), spec.name


def test_the_q4_k_m_file_loads_tokenizes_the_demo_words_and_decodes(small_q4_k_m):
    from swarm_panel.runtime.llama.engine import LlamaEngine

    path, _ = small_q4_k_m
    natural = len(build_vocab()[0])
    with LlamaEngine(path, max_lanes=1, n_ctx=256, n_batch=64) as engine:
        facts = engine_meta(engine)
        assert (facts["architecture"], facts["n_vocab"]) == ("qwen35", 2048)
        assert facts["n_params"] == parameter_count(SMALL)
        prompt = engine.tokenizer.tokenize("the agent can call a tool")
        assert max(prompt) < natural and len(prompt) <= 8  # whole words, no filler
        request = Request(prompt, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
        row = Row(request, RowKind.PREFILL, 0, list(prompt), True)
        while request.num_output_tokens < 4:
            result = engine.step(StepPlan(rows=[row]))
            assert not result.errors
            request.num_computed_tokens = row.start + len(row.tokens)
            request.token_ids.append(result.samples[request.request_id].token)
            row = Row(request, RowKind.DECODE, request.num_tokens - 1, [request.token_ids[-1]], True)
        engine.step(StepPlan(release=[request]))
    assert all(0 <= token < 2048 for token in request.output_token_ids)


def test_a_failed_quantization_leaves_neither_file(tmp_path, monkeypatch):
    monkeypatch.setattr(llama_cpp, "llama_model_quantize", lambda *args: 1)
    with pytest.raises(RuntimeError, match="could not quantize"):
        write_target_shape_model(tmp_path / "model.gguf", HYBRID_SHAPES["tiny"], "q4_k_m")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_f16_file(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(TensorSpec, "draw", broken)
    with pytest.raises(OSError, match="disk full"):
        write_target_shape_model(tmp_path / "model.gguf", HYBRID_SHAPES["tiny"], "f16")
    assert list(tmp_path.iterdir()) == []
