"""The GGUFs already on disk: the hub cache, llama.cpp's cache (LLAMA_CACHE or its default), LM Studio's models
folder and a models_dir setting, each with its size, architecture, quant and trained context from its header."""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
from huggingface_hub import constants

from swarm_panel.app.models_hub.choice import ggufs

log = logging.getLogger(__name__)
_LATER_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class LocalModel:
    path: Path
    size: int  # bytes, every part of a split set
    arch: str
    quant: str
    n_ctx_train: int
    source: str  # which folder found it


def llama_cache() -> Path:
    if env := os.environ.get("LLAMA_CACHE"):
        return Path(env)
    # llama.cpp's fs_get_cache_directory: XDG on Linux, Library/Caches on macOS, LOCALAPPDATA on Windows.
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "llama.cpp"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llama.cpp"


def folders(models_dir: Path | None = None) -> list[tuple[str, Path]]:
    found = [("hub cache", Path(constants.HF_HUB_CACHE)), ("llama.cpp cache", llama_cache()),
             ("LM Studio", Path.home() / ".lmstudio" / "models"),
             ("LM Studio", Path.home() / ".cache" / "lm-studio" / "models")]
    if models_dir is not None:
        found.append(("models_dir", Path(models_dir).expanduser()))
    return found


def describe(path: Path, source: str) -> LocalModel | None:
    """A model's facts from its header; None for a file that is no model GGUF."""
    try:
        fields = gguf.GGUFReader(path).fields
        arch = str(fields["general.architecture"].contents())
        n_ctx = int(fields[f"{arch}.context_length"].contents())
        kind = fields.get("general.file_type")
        quant = gguf.LlamaFileType(int(kind.contents())).name.removeprefix("MOSTLY_") if kind else "?"
    except (OSError, ValueError, KeyError, IndexError) as exc:
        log.debug("%s: not listed (%s)", path, exc)
        return None
    split = _LATER_PART.search(path.name)
    parts = [p for p in path.parent.glob(path.name[:split.start()] + "-*-of-*.gguf")] if split else [path]
    return LocalModel(path, sum(p.stat().st_size for p in parts), arch, quant, n_ctx, source)


def find(models_dir: Path | None = None) -> list[LocalModel]:
    """Every model GGUF in the folders, each split set once (its first part), by path."""
    models: dict[Path, LocalModel] = {}
    for source, folder in folders(models_dir):
        if not folder.is_dir():
            continue
        names = [str(p) for p in folder.rglob("*.gguf") if "blobs" not in p.parts]
        for name in ggufs(names):
            path = Path(name)
            split = _LATER_PART.search(path.name)
            if split and int(split.group(1)) != 1:
                continue
            if path.resolve() not in models and (model := describe(path, source)) is not None:
                models[path.resolve()] = model
    return sorted(models.values(), key=lambda m: str(m.path))
