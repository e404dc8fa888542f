"""A model's shape as llama.cpp reads it from a GGUF header, and the Qwen3.5-9B target's shape.

Only the header and the tensor index are read (the reader memory-maps the file and touches no
tensor data), so a 5 GB file is planned in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    # Layers that hold KV cells; the others (a hybrid's recurrent layers) hold one state per sequence.
    attention_layers: int
    weights_bytes: int
    # Gated DeltaNet / Mamba-style recurrent layers (0 on an attention-only model), in llama.cpp's
    # GGUF terms: ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.inner_size.
    recurrent_layers: int = 0
    ssm_conv_kernel: int = 0
    ssm_state: int = 0
    ssm_groups: int = 0
    ssm_inner: int = 0
    # Where the figures come from, when not from a file.
    source: str = ""

    @property
    def hybrid(self) -> bool:
        return self.recurrent_layers > 0

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_head_kv * self.head_dim_k

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_head_kv * self.head_dim_v

    @property
    def q_dim(self) -> int:
        """The query projection's width: Qwen3.5's attention layers compute an output gate with the query."""
        gate = 2 if self.arch in GATED_QUERY_ARCHS else 1
        return gate * self.n_head * self.head_dim_k

    @property
    def conv_channels(self) -> int:
        """Channels the recurrent layers' short convolution runs over (llama.cpp's n_embd_r / (d_conv - 1))."""
        return self.ssm_inner + 2 * self.ssm_groups * self.ssm_state

    @property
    def recurrent_state_floats(self) -> int:
        """f32 values of one sequence's recurrent state in one layer: the conv window and the SSM state
        (llama.cpp's n_embd_r() + n_embd_s())."""
        return max(self.ssm_conv_kernel - 1, 0) * self.conv_channels + self.ssm_state * self.ssm_inner


GATED_QUERY_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next"})


def read_shape(path: str | Path) -> ModelShape:
    """The shape of the model in a GGUF file; ValueError where the header lacks what a plan needs."""
    path = Path(path)
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable GGUF file: {exc}") from None
    fields = reader.fields

    def value(key: str, default=None):
        field = fields.get(key)
        return default if field is None else field.contents()

    arch = value("general.architecture")
    if arch is None:
        raise ValueError(f"{path} has no general.architecture: not a model GGUF")

    def hp(key: str, default=None):
        found = value(f"{arch}.{key}", default)
        if found is None:
            raise ValueError(f"{path} ({arch}) has no {arch}.{key}: cannot plan its memory")
        return found

    n_layer = int(hp("block_count"))
    n_embd = int(hp("embedding_length"))
    n_head = _per_layer_max(hp("attention.head_count"))
    n_head_kv = _per_layer_max(hp("attention.head_count_kv", n_head))
    head_dim_k = int(hp("attention.key_length", n_embd // n_head))
    head_dim_v = int(hp("attention.value_length", n_embd // n_head))
    tokens = value("tokenizer.ggml.tokens")
    n_vocab = int(value(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0))
    interval = value(f"{arch}.full_attention_interval")
    recurrent_layers = 0
    if interval:
        # Layer i attends when (i + 1) % interval == 0 (llama.cpp's qwen35 / qwen3next loaders).
        recurrent_layers = n_layer - n_layer // int(interval)
    return ModelShape(
        name=str(value("general.name", path.stem)),
        arch=str(arch),
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_ff=_per_layer_max(hp("feed_forward_length")),
        n_vocab=n_vocab,
        n_ctx_train=int(hp("context_length")),
        attention_layers=n_layer - recurrent_layers,
        weights_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        recurrent_layers=recurrent_layers,
        ssm_conv_kernel=int(value(f"{arch}.ssm.conv_kernel", 0)),
        ssm_state=int(value(f"{arch}.ssm.state_size", 0)),
        ssm_groups=int(value(f"{arch}.ssm.group_count", 0)),
        ssm_inner=int(value(f"{arch}.ssm.inner_size", 0)),
        source=str(path),
    )


def _per_layer_max(found) -> int:
    """A hyperparameter given once or per layer (an array): the largest layer's, which sizes buffers."""
    if isinstance(found, list):
        return int(max(found))
    return int(found)


# Qwen3.5-9B's text model, from its config.json (https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json,
# "text_config"): hidden_size 4096, intermediate_size 12288, num_hidden_layers 32 with
# full_attention_interval 4 (8 attention layers, 24 Gated DeltaNet), num_attention_heads 16,
# num_key_value_heads 4, head_dim 256, attn_output_gate true, linear_conv_kernel_dim 4,
# linear_key_head_dim 128, linear_num_key_heads 16, linear_num_value_heads 32, linear_value_head_dim 128,
# vocab_size 248320, max_position_embeddings 262144. In llama.cpp's GGUF terms (convert_hf_to_gguf.py):
# ssm.state_size = linear_key_head_dim, ssm.group_count = linear_num_key_heads, ssm.inner_size =
# linear_value_head_dim x linear_num_value_heads. The weights are the tensor bytes of the Q4_K_M file
# that `swarm-panel demo-model --arch qwen35 --shape 9b` writes with llama.cpp's quantizer (217 Q4_K,
# 33 Q6_K and 177 F32 tensors, 8.95B parameters): the same tensors and recipe as a Q4_K_M of the real
# weights, so the same bytes, less any multi-token-prediction layer a converter may keep.
QWEN35_9B = ModelShape(
    name="Qwen3.5-9B",
    arch="qwen35",
    n_layer=32,
    n_embd=4096,
    n_head=16,
    n_head_kv=4,
    head_dim_k=256,
    head_dim_v=256,
    n_ff=12288,
    n_vocab=248320,
    n_ctx_train=262144,
    attention_layers=8,
    weights_bytes=5_618_141_184,
    recurrent_layers=24,
    ssm_conv_kernel=4,
    ssm_state=128,
    ssm_groups=16,
    ssm_inner=4096,
    source="Qwen3.5-9B config.json (text_config); weights: its shape in Q4_K_M",
)
