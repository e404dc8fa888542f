"""The tensors of a random-weight qwen35 (Qwen3.5) GGUF: Gated DeltaNet layers with full attention every 4th.

It exists so the engine's hybrid memory (a KV part plus one recurrent state per sequence) is tested
on the architecture the product targets. Its weights are scaled so that a recurrent state that has
seen the wrong tokens changes greedy tokens within a few steps: with the llama writer's small scales
a stale state moves the logits by ~0.002 and no test could see it.

Besides the small shapes, HYBRID_SHAPES holds Qwen3.5-9B's own, which runtime.models.target_shape writes
streaming and quantizes: too large for the in-memory writer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

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
    # Rotary dimensions of each attention head; 0: half the head. Sections (text, height, width, extra) must
    # sum to half the rotary dimensions; None: split evenly over text, height and width.
    rope_dims: int = 0
    rope_sections: tuple[int, int, int, int] | None = None
    rope_freq_base: float = 10000.0
    # Tokens in the vocabulary; 0: the demo vocabulary's own few hundred, more: padded with unused fillers
    # so the embedding and output matrices have a real model's size.
    n_vocab: int = 0


HYBRID_SHAPES: dict[str, HybridShape] = {
    # About 0.6M parameters: loads in milliseconds; one recurrent snapshot is ~50 KB.
    "tiny": HybridShape(dim=128, n_layer=4, n_head=4, n_head_kv=2, head_dim=32, n_ff=384, n_ctx_train=4096),
    # About 120M parameters, where batching visibly pays on a CPU.
    "demo": HybridShape(dim=1024, n_layer=12, n_head=8, n_head_kv=2, head_dim=128, n_ff=2816, n_ctx_train=8192,
                        state_size=64, group_count=4, time_step_rank=8),
    # Qwen3.5-9B's text model, https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json ("text_config"):
    # hidden_size 4096, intermediate_size 12288, num_hidden_layers 32, full_attention_interval 4,
    # num_attention_heads 16, num_key_value_heads 4, head_dim 256, linear_conv_kernel_dim 4,
    # linear_key_head_dim 128 = linear_value_head_dim, linear_num_key_heads 16, linear_num_value_heads 32,
    # vocab_size 248320, max_position_embeddings 262144, rope_theta 1e7, partial_rotary_factor 0.25 (64 of
    # the 256 head dimensions rotate), mrope_section [11, 11, 10]. llama.cpp's converter (conversion/qwen.py,
    # Qwen3NextModel) maps them to ssm.state_size = linear_key_head_dim, ssm.group_count = linear_num_key_heads,
    # ssm.time_step_rank = linear_num_value_heads, ssm.inner_size = linear_value_head_dim x linear_num_value_heads;
    # its loader takes the value head as wide as the key head, as here. About 8.95B parameters, 18 GB of F16:
    # written only streaming (runtime.models.target_shape).
    "9b": HybridShape(dim=4096, n_layer=32, n_head=16, n_head_kv=4, head_dim=256, n_ff=12288, n_ctx_train=262144,
                      state_size=128, group_count=16, time_step_rank=32, rope_dims=64, rope_sections=(11, 11, 10, 0),
                      rope_freq_base=1e7, n_vocab=248320),
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor: its GGUF name, its numpy shape (ggml's reversed: rows are outputs) and how its random values
    are drawn. A writer may draw it whole or a few rows at a time: the values come out the same."""

    name: str
    shape: tuple[int, ...]
    # normal: F16, standard normal x scale; conv: F32, normal x scale; decay: F32, minus uniform in [0.02, 1).
    fill: Literal["normal", "ones", "zeros", "conv", "decay"]
    scale: float = 1.0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float16 if self.fill == "normal" else np.float32)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.n_elements * self.dtype.itemsize

    def draw(self, rng: np.random.Generator, rows: int | None = None) -> np.ndarray:
        """The next `rows` rows (the whole tensor when None), drawn from rng in order."""
        shape = self.shape if rows is None else (rows, *self.shape[1:])
        # The products keep the scale's own type (a numpy float64 computes in float64), as the files always had.
        if self.fill == "normal":
            return (rng.standard_normal(shape, dtype=np.float32) * self.scale).astype(np.float16)
        if self.fill == "conv":
            return (rng.standard_normal(shape) * self.scale).astype(np.float32)
        if self.fill == "decay":
            return -rng.uniform(0.02, 1.0, shape).astype(np.float32)
        return (np.ones if self.fill == "ones" else np.zeros)(shape, dtype=np.float32)


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
    writer.add_rope_freq_base(shape.rope_freq_base)
    rope_dims = shape.rope_dims or shape.head_dim // 2
    writer.add_rope_dimension_count(rope_dims)
    # Multimodal rope sections (text, height, width, extra) must sum to half the rotary dimensions.
    half = rope_dims // 2
    sections = shape.rope_sections or (half - 2 * (half // 3), half // 3, half // 3, 0)
    if sum(sections) != half:
        raise ValueError(f"rope sections {sections} must sum to half the {rope_dims} rotary dimensions")
    writer.add_rope_dimension_sections(list(sections))
    writer.add_ssm_conv_kernel(shape.conv_kernel)
    writer.add_ssm_state_size(shape.state_size)
    writer.add_ssm_group_count(shape.group_count)
    writer.add_ssm_time_step_rank(shape.time_step_rank)
    writer.add_ssm_inner_size(inner)
    writer.add_full_attention_interval(shape.full_attention_interval)


def add_hybrid_tensors(writer: gguf.GGUFWriter, shape: HybridShape, n_vocab: int, rng: np.random.Generator) -> int:
    """The embedding and every layer, drawn whole; returns the width the output head reads."""
    for spec in hybrid_tensor_specs(shape, n_vocab):
        writer.add_tensor(spec.name, spec.draw(rng))
    return shape.dim


def hybrid_tensor_specs(shape: HybridShape, n_vocab: int) -> list[TensorSpec]:
    """The embedding and every layer, in the order they are written and drawn: the names and numpy shapes
    llama.cpp's qwen35 loader (src/models/qwen35.cpp) requires, ggml's shapes reversed."""
    dim, ff, hd = shape.dim, shape.n_ff, shape.head_dim
    key_dim = shape.state_size * shape.group_count
    inner = shape.state_size * shape.time_step_rank
    conv_dim = 2 * key_dim + inner
    # The residual stream is read at 1/sqrt(dim) (unit-variance projections); the recurrent path writes
    # back at full strength so what the state remembers moves the next token.
    read = 1.0 / np.sqrt(dim)
    specs = [TensorSpec("token_embd.weight", (n_vocab, dim), "normal", 1.0)]
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        specs += [TensorSpec(f"{blk}.attn_norm.weight", (dim,), "ones"),
                  TensorSpec(f"{blk}.post_attention_norm.weight", (dim,), "ones")]
        if (i + 1) % shape.full_attention_interval == 0:
            specs += [
                # Query and its output gate come from one projection.
                TensorSpec(f"{blk}.attn_q.weight", (2 * shape.n_head * hd, dim), "normal", read),
                TensorSpec(f"{blk}.attn_k.weight", (shape.n_head_kv * hd, dim), "normal", read),
                TensorSpec(f"{blk}.attn_v.weight", (shape.n_head_kv * hd, dim), "normal", read),
                TensorSpec(f"{blk}.attn_output.weight", (dim, shape.n_head * hd), "normal", 0.5 / np.sqrt(hd)),
                TensorSpec(f"{blk}.attn_q_norm.weight", (hd,), "ones"),
                TensorSpec(f"{blk}.attn_k_norm.weight", (hd,), "ones"),
            ]
        else:
            specs += [
                TensorSpec(f"{blk}.attn_qkv.weight", (conv_dim, dim), "normal", read),
                TensorSpec(f"{blk}.attn_gate.weight", (inner, dim), "normal", read),
                TensorSpec(f"{blk}.ssm_conv1d.weight", (conv_dim, shape.conv_kernel), "conv", 0.5),
                TensorSpec(f"{blk}.ssm_dt.bias", (shape.time_step_rank,), "zeros"),
                # Slow decay: the state keeps tokens from far back, as a trained model's does.
                TensorSpec(f"{blk}.ssm_a", (shape.time_step_rank,), "decay"),
                TensorSpec(f"{blk}.ssm_beta.weight", (shape.time_step_rank, dim), "normal", read),
                TensorSpec(f"{blk}.ssm_alpha.weight", (shape.time_step_rank, dim), "normal", read),
                TensorSpec(f"{blk}.ssm_norm.weight", (shape.state_size,), "ones"),
                TensorSpec(f"{blk}.ssm_out.weight", (dim, inner), "normal", 2.0 / np.sqrt(inner)),
            ]
        specs += [TensorSpec(f"{blk}.ffn_gate.weight", (ff, dim), "normal", read),
                  TensorSpec(f"{blk}.ffn_up.weight", (ff, dim), "normal", read),
                  TensorSpec(f"{blk}.ffn_down.weight", (dim, ff), "normal", 0.5 / np.sqrt(ff))]
    return specs
