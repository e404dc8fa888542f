"""The memory plan's arithmetic: KV and recurrent bytes from the shape, layouts as llama.cpp pads
them, device fit, and both ways of asking (most lanes at a context, longest context at lanes)."""

import dataclasses

import pytest

from swarm_panel.runtime.planning.memory_plan import (
    GIB,
    PlanSettings,
    kv_bytes_per_token,
    longest_context,
    most_lanes,
    plan_memory,
    recurrent_bytes_per_sequence,
    row_bytes,
)
from swarm_panel.runtime.planning.shape import QWEN35_9B, read_shape


def test_kv_bytes_per_token_follow_ggml_block_sizes():
    # 8 attention layers x (K + V) x 4 KV heads x 256: f16 2 bytes a value; q8_0 34 and q4_0 18 bytes a 32-block.
    assert kv_bytes_per_token(QWEN35_9B, "f16") == 8 * 2 * 1024 * 2
    assert kv_bytes_per_token(QWEN35_9B, "q8_0") == 8 * 2 * 1024 // 32 * 34
    assert kv_bytes_per_token(QWEN35_9B, "q4_0") == 8 * 2 * 1024 // 32 * 18
    with pytest.raises(ValueError, match="kv_type"):
        row_bytes("q5_1", 32)
    with pytest.raises(ValueError, match="blocks of 32"):
        row_bytes("q8_0", 48)


def test_the_targets_recurrent_state_is_llama_cpps_conv_window_and_ssm_state():
    conv = 3 * (4096 + 2 * 16 * 128)  # (d_conv - 1) x (d_inner + 2 x n_group x d_state)
    ssm = 128 * 4096  # d_state x d_inner
    assert recurrent_bytes_per_sequence(QWEN35_9B) == 24 * (conv + ssm) * 4


def test_a_hybrid_holds_one_state_per_sequence_id_whatever_the_context(tiny_qwen35_model_path):
    shape = read_shape(tiny_qwen35_model_path)
    assert shape.hybrid and shape.attention_layers + shape.recurrent_layers == shape.n_layer
    short = plan_memory(shape, PlanSettings(lanes=4, context=256))
    long = plan_memory(shape, PlanSettings(lanes=4, context=1024))
    assert short.recurrent == long.recurrent == 4 * recurrent_bytes_per_sequence(shape)
    # A unified pool keeps a cached sequence id beside each lane, and llama.cpp a state for each.
    unified = plan_memory(shape, PlanSettings(lanes=4, context=256, kv_unified=True))
    assert unified.recurrent == 2 * short.recurrent
    assert long.kv == 4 * short.kv


def test_an_attention_model_has_no_recurrent_state_and_pads_each_stream_to_256(tiny_model_path):
    shape = read_shape(tiny_model_path)
    assert not shape.hybrid
    plan = plan_memory(shape, PlanSettings(lanes=3, context=300))
    assert plan.recurrent == 0
    assert plan.stream_cells == 512 and plan.kv_cells == 3 * 512
    assert plan.kv == plan.kv_cells * kv_bytes_per_token(shape)


def test_what_does_not_fit_says_why():
    plan = plan_memory(QWEN35_9B, PlanSettings(lanes=32, context=32768, flash_attn=True), device_bytes=16 * GIB,
                       reserve=512 << 20)
    assert not plan.fits
    assert "more than the" in plan.problems[0] and "KV" in plan.problems[0]
    no_fa = plan_memory(QWEN35_9B, PlanSettings(lanes=1, context=4096, kv_type="q8_0", flash_attn=False))
    assert any("needs flash attention" in p for p in no_fa.problems)
    too_long = plan_memory(QWEN35_9B, PlanSettings(lanes=1, context=QWEN35_9B.n_ctx_train + 256, flash_attn=True))
    assert any("trained on" in p for p in too_long.problems)


@pytest.mark.parametrize("kv_type", ["f16", "q8_0", "q4_0"])
def test_both_ways_give_the_edge_of_what_fits(kv_type):
    card, reserve = 16 * GIB, 512 << 20
    kw = {"kv_type": kv_type, "flash_attn": True}
    lanes = most_lanes(QWEN35_9B, 32768, card, reserve=reserve, **kw)
    assert lanes >= 1

    def fits(settings):
        return plan_memory(QWEN35_9B, settings, device_bytes=card, reserve=reserve).fits

    assert fits(PlanSettings(lanes=lanes, context=32768, **kw))
    assert not fits(PlanSettings(lanes=lanes + 1, context=32768, **kw))
    context = longest_context(QWEN35_9B, 8, card, reserve=reserve, **kw)
    assert context % 256 == 0
    assert fits(PlanSettings(lanes=8, context=context, **kw))
    assert not fits(PlanSettings(lanes=8, context=context + 256, **kw))


def test_quantized_kv_holds_more_lanes_on_the_same_card():
    card = 16 * GIB
    found = [most_lanes(QWEN35_9B, 32768, card, kv_type=t, flash_attn=True) for t in ("f16", "q8_0", "q4_0")]
    assert found[0] < found[1] < found[2]


def test_read_shape_refuses_what_is_not_a_model(tmp_path):
    junk = tmp_path / "x.gguf"
    junk.write_bytes(b"not a gguf")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        read_shape(junk)


def test_settings_are_checked():
    with pytest.raises(ValueError):
        PlanSettings(lanes=0, context=10)
    with pytest.raises(ValueError):
        PlanSettings(lanes=1, context=10, kv_type="bf16")
    assert dataclasses.replace(PlanSettings(lanes=2, context=100), kv_unified=True).sequence_ids == 4


def test_the_9b_file_writer_and_the_plan_share_one_target_shape():
    """demo-model --shape 9b writes what the plan's Qwen3.5-9B describes (both cite the same config)."""
    from swarm_panel.runtime.models.demo_hybrid import HYBRID_SHAPES

    written = HYBRID_SHAPES["9b"]
    t = QWEN35_9B
    assert (written.dim, written.n_layer, written.n_head, written.n_head_kv, written.head_dim, written.n_ff,
            written.n_ctx_train, written.n_vocab) == (t.n_embd, t.n_layer, t.n_head, t.n_head_kv, t.head_dim_k,
                                                      t.n_ff, t.n_ctx_train, t.n_vocab)
    assert (written.conv_kernel, written.state_size, written.group_count, written.state_size * written.time_step_rank
            ) == (t.ssm_conv_kernel, t.ssm_state, t.ssm_groups, t.ssm_inner)
    assert written.n_layer // written.full_attention_interval == t.attention_layers
