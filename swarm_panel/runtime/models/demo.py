"""Random-weight GGUF files for tests and demos: the whole pipeline runs without a download.

Two architectures: `llama` (plain attention, the batching demo) and `qwen35` (the hybrid of Gated
DeltaNet and attention layers that Qwen3.5 is, see runtime.models.demo_hybrid).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gguf
import numpy as np
import platformdirs

from swarm_panel.runtime.core.careful_write import atomic_path
from swarm_panel.runtime.llama.model_info import CHAT_TEMPLATE
from swarm_panel.runtime.models.demo_hybrid import (
    HYBRID_SHAPES,
    HybridShape,
    TensorSpec,
    add_hybrid_hparams,
    add_hybrid_tensors,
)

DemoSize = Literal["tiny", "demo"]
DemoArch = Literal["llama", "qwen35"]
ARCHS = ("llama", "qwen35")

MODEL_NAME = "swarm-panel demo (random weights)"
# Qwen3.5's vocabulary: the stand-in's logits are a real card's size while its steps stay fast, so the
# host's share of a step (logits copied and sampled row by row) shows on a CPU as it does on a card.
QWEN35_VOCAB = 248_320


@dataclass(frozen=True, slots=True)
class DemoShape:
    dim: int
    n_layer: int
    n_head: int
    n_ff: int
    n_ctx_train: int


SHAPES: dict[str, DemoShape] = {
    # About 0.6M parameters, 1.3 MB: writes and loads in milliseconds for unit tests.
    "tiny": DemoShape(dim=128, n_layer=2, n_head=4, n_ff=512, n_ctx_train=2048),
    # About 142M parameters, 285 MB of f16, written in ~3 s: CPU decode is memory-bound, so batching pays.
    "demo": DemoShape(dim=1024, n_layer=11, n_head=16, n_ff=2816, n_ctx_train=4096),
}

# Common words as whole pieces, so English text needs fewer tokens than bytes; the rest falls back to bytes.
_WORDS = (
    "the of and to in is that it for you was with on as are be this have not or by at from "
    "what all we can your if do will about how agent tool call hello world"
).split()
_CHARACTERS = list("abcdefghijklmnopqrstuvwxyz.,:;!?'\"-0123456789")

def build_vocab(n_vocab: int = 0) -> tuple[list[str], list[float], list[int]]:
    """SPM vocabulary with byte fallback: specials, 256 byte tokens, then word pieces, then (to make n_vocab
    tokens in all) unused fillers, which give the embedding and output matrices a real model's size.

    llama.cpp's SPM tokenizer merges adjacent symbols only into pieces that exist, so every
    prefix of a word piece is in the vocabulary too.
    """
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
             gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces: dict[str, None] = dict.fromkeys(["▁", *_CHARACTERS])
    for word in _WORDS:
        spelled = "▁" + word
        for end in range(2, len(spelled) + 1):
            pieces[spelled[:end]] = None
    tokens += list(pieces)
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # Longer pieces score higher, so the tokenizer prefers whole words.
    scores = [0.0] * (5 + 256) + [float(len(p)) for p in pieces]
    if n_vocab and n_vocab < len(tokens):
        raise ValueError(f"the demo vocabulary has {len(tokens)} tokens, more than {n_vocab}")
    # UNUSED, not CONTROL: llama.cpp scans every control token for each text it tokenizes.
    fillers = max(0, n_vocab - len(tokens))
    tokens += [f"<|filler_{i}|>" for i in range(fillers)]
    types += [gguf.TokenType.UNUSED] * fillers
    scores += [0.0] * fillers
    return tokens, scores, [int(t) for t in types]


def add_demo_metadata(writer: gguf.GGUFWriter, shape: DemoShape | HybridShape, tokens: list[str],
                      scores: list[float], types: list[int]) -> None:
    """Everything but the tensors: name, file type (F16), hyperparameters, vocabulary and chat template."""
    arch = writer.arch
    writer.add_name(MODEL_NAME if arch == "llama" else f"{MODEL_NAME}, {arch}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if isinstance(shape, HybridShape):
        add_hybrid_hparams(writer, shape)
    else:
        _add_llama_hparams(writer, shape)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_eot_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHAT_TEMPLATE)


def head_tensor_specs(dim: int, n_vocab: int) -> list[TensorSpec]:
    """The output norm and head, written after the layers."""
    # Logits with a spread of a few units: greedy picks are clear, sampling is not degenerate.
    return [TensorSpec("output_norm.weight", (dim,), "ones"),
            TensorSpec("output.weight", (n_vocab, dim), "normal", 3.0 / np.sqrt(dim))]


def damp_non_words(output_rows: np.ndarray, row_types: np.ndarray) -> None:
    """Byte, control and filler tokens get smaller logits, so output reads as (random) words and rarely ends early."""
    output_rows[row_types != gguf.TokenType.NORMAL] *= 0.25


def write_demo_model(path: str | os.PathLike[str], size: DemoSize = "tiny", seed: int = 0,
                     arch: DemoArch = "llama", n_vocab: int = 0) -> Path:
    """A random-weight model; `n_vocab` pads the vocabulary with unused tokens to that size (0: the words only)."""
    if size not in SHAPES:
        hint = " (a real model's shape: runtime.models.target_shape writes it)" if size in HYBRID_SHAPES else ""
        raise ValueError(f"size must be one of {sorted(SHAPES)}, got {size!r}{hint}")
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {list(ARCHS)}, got {arch!r}")
    path = Path(path)
    shape = SHAPES[size] if arch == "llama" else HYBRID_SHAPES[size]
    tokens, scores, types = build_vocab(n_vocab)
    n_vocab = len(tokens)

    writer = gguf.GGUFWriter(str(path), arch)
    add_demo_metadata(writer, shape, tokens, scores, types)

    rng = np.random.default_rng(seed)
    if isinstance(shape, HybridShape):
        dim = add_hybrid_tensors(writer, shape, n_vocab, rng)
    else:
        dim = _add_llama_tensors(writer, shape, n_vocab, rng)
    for spec in head_tensor_specs(dim, n_vocab):
        tensor = spec.draw(rng)
        if spec.name == "output.weight":
            damp_non_words(tensor, np.array(types))
        writer.add_tensor(spec.name, tensor)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_llama_hparams(writer: gguf.GGUFWriter, shape: DemoShape) -> None:
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.dim)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head)
    writer.add_rope_dimension_count(shape.dim // shape.n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)


def _add_llama_tensors(writer: gguf.GGUFWriter, shape: DemoShape, n_vocab: int, rng: np.random.Generator) -> int:
    """The embedding and every layer; returns the width the output head reads."""
    def weight(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(shape.dim, dtype=np.float32)

    dim, ff = shape.dim, shape.n_ff
    writer.add_tensor("token_embd.weight", weight(n_vocab, dim, 1.0))
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(dim, dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, dim))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, dim))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(dim, ff))
    return dim


def default_demo_model_path(size: DemoSize = "demo", arch: DemoArch = "llama", n_vocab: int = 0) -> Path:
    name = ("demo-model" + ("" if size == "demo" else f"-{size}") + ("" if arch == "llama" else f"-{arch}")
            + (f"-vocab{n_vocab}" if n_vocab else ""))
    return platformdirs.user_data_path("swarm-panel") / f"{name}.gguf"


def ensure_demo_model(size: DemoSize = "demo", path: str | os.PathLike[str] | None = None,
                      arch: DemoArch = "llama", n_vocab: int = 0) -> Path:
    """Write the demo model once (atomically) and reuse it afterwards. Where the user's data folder cannot be
    written, the model goes to the temp folder for this run (one warning), so a read-only home still serves."""
    target = Path(path) if path is not None else default_demo_model_path(size, arch, n_vocab)
    if target.is_file():
        return target
    lost = "the demo model is written to the temp folder instead" if path is None else "the demo model is not written"
    if _written(target, size, arch, n_vocab, lost):
        return target
    if path is None:
        spare = Path(tempfile.gettempdir()) / f"swarm-panel-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
        fallback = spare / target.name
        if fallback.is_file() or _written(fallback, size, arch, n_vocab, "the demo model cannot be written anywhere"):
            return fallback
    raise OSError(f"cannot write the demo model at {target}")


def _written(target: Path, size: DemoSize, arch: DemoArch, n_vocab: int, lost: str) -> bool:
    with atomic_path(target, lost=lost) as temp:
        if temp.path is not None:
            write_demo_model(temp.path, size, arch=arch, n_vocab=n_vocab)
    return temp.ok
