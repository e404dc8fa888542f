"""Random-weight qwen35 GGUF files in a real model's shape (Qwen3.5-9B), written streaming and quantized
with llama.cpp's own quantizer.

write_demo_model (runtime.models.demo) holds every tensor until it writes the file: fine at 120M parameters,
not at 9B, which are 18 GB of F16. Here the header lists every tensor first (names, shapes and sizes are known
before any value is drawn), then each tensor is drawn and written on its own, large ones a few rows at a time,
so memory holds one chunk. The values are the in-memory writer's, drawn in the same order: the demo shapes come
out byte for byte as write_demo_model writes them.

The F16 file then goes through llama_model_quantize, the code `llama-quantize` runs, so a Q4_K_M file has the
real recipe's tensor types and sizes: what a decode step costs on it is what it costs on the real model.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import gguf
import llama_cpp
import numpy as np

from swarm_panel.runtime.llama.model import ensure_backend, llama_cpp_logger, take_recent_problems
from swarm_panel.runtime.models.demo import add_demo_metadata, build_vocab, damp_non_words, head_tensor_specs
from swarm_panel.runtime.models.demo_hybrid import HybridShape, TensorSpec, hybrid_tensor_specs

logger = logging.getLogger(__name__)

ModelType = Literal["f16", "q4_k_m"]
MODEL_TYPES: tuple[ModelType, ...] = ("f16", "q4_k_m")
# What `quantize` writes: the target's Q4_K_M, and Q8_0 for the gpu suite's tiny models (tests/gpu/conftest.py).
QuantType = Literal["q4_k_m", "q8_0"]
_FTYPES = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}

# Called with the stage ("write" or "quantize"), the tensors done and the tensors in all: (0, n) as a stage starts,
# (0, 0) when the quantizer has not said yet how many tensors it has.
Progress = Callable[[str, int, int], None]

# F16 bytes drawn at once. Drawing computes in float32 and float64 first, so memory peaks at ~7x this:
# ~450 MB, where the 248k-token embedding whole would take 14 GB.
CHUNK_BYTES = 64 * 2**20

# llama.cpp's quantizer logs one line per tensor: "[  12/ 427]  blk.0.attn_qkv.weight - [...] ..."
_QUANTIZE_LINE = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")


def vocab_size(shape: HybridShape) -> int:
    return shape.n_vocab or len(build_vocab()[0])


def target_tensor_specs(shape: HybridShape) -> list[TensorSpec]:
    """Every tensor of the file, in the order it is written: what the writer draws and llama.cpp loads."""
    n_vocab = vocab_size(shape)
    return hybrid_tensor_specs(shape, n_vocab) + head_tensor_specs(shape.dim, n_vocab)


def parameter_count(shape: HybridShape) -> int:
    return sum(spec.n_elements for spec in target_tensor_specs(shape))


def write_f16_streaming(path: str | os.PathLike[str], shape: HybridShape, seed: int = 0,
                        progress: Progress | None = None) -> Path:
    """The F16 qwen35 file of this shape, one tensor (or chunk of rows) in memory at a time."""
    path = Path(path)
    tokens, scores, types = build_vocab(shape.n_vocab)
    specs = hybrid_tensor_specs(shape, len(tokens)) + head_tensor_specs(shape.dim, len(tokens))
    logger.info("writing %s: %d tensors, %.2f GB of F16", path, len(specs), sum(s.nbytes for s in specs) / 1e9)

    writer = gguf.GGUFWriter(str(path), "qwen35")
    add_demo_metadata(writer, shape, tokens, scores, types)
    for spec in specs:
        writer.add_tensor_info(spec.name, spec.shape, spec.dtype, spec.nbytes)
    row_types = np.array(types)
    rng = np.random.default_rng(seed)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        # The data section, and every tensor in it, starts on the alignment the tensor infos' offsets assume.
        fout = writer.fout[0]
        writer.write_padding(fout, fout.tell())
        if progress is not None:
            progress("write", 0, len(specs))
        for done, spec in enumerate(specs, 1):
            written = 0
            for start, rows in _row_chunks(spec, rng):
                if spec.name == "output.weight":
                    damp_non_words(rows, row_types[start:start + len(rows)])
                rows.tofile(fout)
                written += rows.nbytes
            if written != spec.nbytes:
                raise AssertionError(f"{spec.name}: wrote {written} bytes, its info says {spec.nbytes}")
            writer.write_padding(fout, spec.nbytes)
            if progress is not None:
                progress("write", done, len(specs))
    finally:
        writer.close()
    return path


def _row_chunks(spec: TensorSpec, rng: np.random.Generator) -> Iterator[tuple[int, np.ndarray]]:
    """The tensor in (first row, rows) pieces of about CHUNK_BYTES; small and 1-D tensors whole."""
    if len(spec.shape) < 2 or spec.nbytes <= CHUNK_BYTES:
        yield 0, spec.draw(rng)
        return
    n_rows = spec.shape[0]
    step = max(1, CHUNK_BYTES // (spec.nbytes // n_rows))
    for start in range(0, n_rows, step):
        yield start, spec.draw(rng, min(step, n_rows - start))


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], model_type: QuantType = "q4_k_m",
             progress: Progress | None = None) -> None:
    """Quantize a GGUF with llama.cpp's quantizer (llama-quantize's code and recipe), on every core."""
    if model_type not in _FTYPES:
        raise ValueError(f"quantize to one of {sorted(_FTYPES)}, got {model_type!r}")
    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = os.cpu_count() or 1
    params.ftype = _FTYPES[model_type]
    logger.info("quantizing %s to %s with %d threads", src, model_type.upper(), params.nthread)
    take_recent_problems()
    if progress is not None:
        progress("quantize", 0, 0)
    with _quantize_progress(progress):
        rc = llama_cpp.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(params))
    if rc != 0:
        problems = "; ".join(take_recent_problems()) or "no message"
        raise RuntimeError(f"llama.cpp could not quantize {src} to {model_type.upper()}: {problems}")


@contextlib.contextmanager
def _quantize_progress(progress: Progress | None) -> Iterator[None]:
    """Report the quantizer's per-tensor log lines, which runtime.llama.model forwards as debug records."""
    if progress is None:
        yield
        return

    class _Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if found := _QUANTIZE_LINE.match(record.getMessage()):
                progress("quantize", int(found[1]), int(found[2]))

    handler = _Lines(logging.DEBUG)
    level, propagate = llama_cpp_logger.level, llama_cpp_logger.propagate
    if not llama_cpp_logger.isEnabledFor(logging.DEBUG):
        # Debug records are needed here, but not on the root's handlers, which did not show them before.
        llama_cpp_logger.setLevel(logging.DEBUG)
        llama_cpp_logger.propagate = False
    llama_cpp_logger.addHandler(handler)
    try:
        yield
    finally:
        llama_cpp_logger.removeHandler(handler)
        llama_cpp_logger.setLevel(level)
        llama_cpp_logger.propagate = propagate


def write_model_file(path: str | os.PathLike[str], write_f16: Callable[[Path], object],
                     model_type: ModelType = "q4_k_m", progress: Progress | None = None) -> Path:
    """write_f16 writes an F16 file to a temporary path next to `path`; it is quantized (unless model_type is
    f16) and lands at `path` only when whole. The F16 file is removed in every case, failure included."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model type must be one of {list(MODEL_TYPES)}, got {model_type!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    f16 = _temp_next_to(target, ".f16.tmp")
    try:
        write_f16(f16)
        if model_type == "f16":
            os.replace(f16, target)
            return target
        out = _temp_next_to(target, ".tmp")
        try:
            quantize(f16, out, model_type, progress)
            os.replace(out, target)
        except BaseException:
            out.unlink(missing_ok=True)
            raise
    finally:
        f16.unlink(missing_ok=True)
    return target


def write_target_shape_model(path: str | os.PathLike[str], shape: HybridShape, model_type: ModelType = "q4_k_m",
                             seed: int = 0, progress: Progress | None = None) -> Path:
    """A random-weight qwen35 file of this shape, written streaming, then quantized."""
    return write_model_file(path, lambda f16: write_f16_streaming(f16, shape, seed, progress), model_type, progress)


def _temp_next_to(target: Path, suffix: str) -> Path:
    # Next to the target, so the rename is atomic and the 18 GB of F16 go to the disk that has room for the result.
    # A fresh name, not mkstemp's file: the writers create it with the umask's mode, as the target should have.
    return target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")
