"""The tensors of a random-weight qwen35 (Qwen3.5) GGUF: Gated DeltaNet layers with full attention every 4th.

It exists so the engine's hybrid memory (a KV part plus one recurrent state per sequence) is tested
on the architecture the product targets. Its weights are scaled so that a recurrent state that has
seen the wrong tokens changes greedy tokens within a few steps: with the llama writer's small scales
a stale state moves the logits by ~0.002 and no test could see it.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np


@dataclass(frozen=True, slots=True)
class HybridShape:
    dim: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    # Gated DeltaNet: heads of state_size x state_size, conv over the last conv_kernel tokens.
    conv_kernel: int = 4
    state_size: int = 16
    group_count: int = 2
    time_step_rank: int = 4
    # Layer i is full attention when (i + 1) % interval == 0: 3 recurrent layers per attention layer.
    full_attention_interval: int = 4


HYBRID_SHAPES: dict[str, HybridShape] = {
    # About 0.6M parameters: loads in milliseconds; one recurrent snapshot is ~50 KB.
    "tiny": HybridShape(dim=128, n_layer=4, n_head=4, n_head_kv=2, head_dim=32, n_ff=384, n_ctx_train=4096),
    # About 120M parameters, where batching visibly pays on a CPU.
    "demo": HybridShape(dim=1024, n_layer=12, n_head=8, n_head_kv=2, head_dim=128, n_ff=2816, n_ctx_train=8192,
                        state_size=64, group_count=4, time_step_rank=8),
}


def add_hybrid_hparams(writer: gguf.GGUFWriter, shape: HybridShape) -> None:
    inner = shape.state_size * shape.time_step_rank
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.dim)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    rope_dims = shape.head_dim // 2
    writer.add_rope_dimension_count(rope_dims)
    # Multimodal rope sections (text, height, width, extra) must sum to half the rotary dimensions.
    half = rope_dims // 2
    writer.add_rope_dimension_sections([half - 2 * (half // 3), half // 3, half // 3, 0])
    writer.add_ssm_conv_kernel(shape.conv_kernel)
    writer.add_ssm_state_size(shape.state_size)
    writer.add_ssm_group_count(shape.group_count)
    writer.add_ssm_time_step_rank(shape.time_step_rank)
    writer.add_ssm_inner_size(inner)
    writer.add_full_attention_interval(shape.full_attention_interval)


def add_hybrid_tensors(writer: gguf.GGUFWriter, shape: HybridShape, n_vocab: int, rng: np.random.Generator) -> int:
    """The embedding and every layer, in numpy order (ggml's shapes reversed: rows are outputs); returns
    the width the output head reads."""

    def weight(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    dim, ff, hd = shape.dim, shape.n_ff, shape.head_dim
    key_dim = shape.state_size * shape.group_count
    inner = shape.state_size * shape.time_step_rank
    conv_dim = 2 * key_dim + inner
    # The residual stream is read at 1/sqrt(dim) (unit-variance projections); the recurrent path writes
    # back at full strength so what the state remembers moves the next token.
    read = 1.0 / np.sqrt(dim)
    writer.add_tensor("token_embd.weight", weight(n_vocab, dim, 1.0))
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(dim))
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", ones(dim))
        if (i + 1) % shape.full_attention_interval == 0:
            # Query and its output gate come from one projection.
            writer.add_tensor(f"blk.{i}.attn_q.weight", weight(2 * shape.n_head * hd, dim, read))
            writer.add_tensor(f"blk.{i}.attn_k.weight", weight(shape.n_head_kv * hd, dim, read))
            writer.add_tensor(f"blk.{i}.attn_v.weight", weight(shape.n_head_kv * hd, dim, read))
            writer.add_tensor(f"blk.{i}.attn_output.weight", weight(dim, shape.n_head * hd, 0.5 / np.sqrt(hd)))
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", ones(hd))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", ones(hd))
        else:
            writer.add_tensor(f"blk.{i}.attn_qkv.weight", weight(conv_dim, dim, read))
            writer.add_tensor(f"blk.{i}.attn_gate.weight", weight(inner, dim, read))
            writer.add_tensor(f"blk.{i}.ssm_conv1d.weight",
                              (rng.standard_normal((conv_dim, shape.conv_kernel)) * 0.5).astype(np.float32))
            writer.add_tensor(f"blk.{i}.ssm_dt.bias", np.zeros(shape.time_step_rank, dtype=np.float32))
            # Slow decay: the state keeps tokens from far back, as a trained model's does.
            writer.add_tensor(f"blk.{i}.ssm_a", -rng.uniform(0.02, 1.0, shape.time_step_rank).astype(np.float32))
            writer.add_tensor(f"blk.{i}.ssm_beta.weight", weight(shape.time_step_rank, dim, read))
            writer.add_tensor(f"blk.{i}.ssm_alpha.weight", weight(shape.time_step_rank, dim, read))
            writer.add_tensor(f"blk.{i}.ssm_norm.weight", ones(shape.state_size))
            writer.add_tensor(f"blk.{i}.ssm_out.weight", weight(dim, inner, 2.0 / np.sqrt(inner)))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, dim, read))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, dim, read))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(dim, ff, 0.5 / np.sqrt(ff)))
    return dim
