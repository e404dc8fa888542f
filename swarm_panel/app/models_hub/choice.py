"""Which GGUF files of a repository a quant tag names, the way llama-server's `-hf ORG/REPO[:QUANT]` picks."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "hf:"
DEFAULT_QUANT = "Q4_K_M"
# llama-server falls back in this order when no tag is given and Q4_K_M is missing.
FALLBACK_QUANTS = (DEFAULT_QUANT, "Q8_0")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class HubModel:
    repo: str
    quant: str | None  # None: the default, as llama-server chooses it

    def __str__(self) -> str:
        return f"{PREFIX}{self.repo}" + (f":{self.quant}" if self.quant else "")


def is_hub_name(model: object) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


def parse(name: str) -> HubModel:
    """`hf:ORG/REPO[:QUANT]` (or `ORG/REPO[:QUANT]`, as `pull` takes it)."""
    body = name.removeprefix(PREFIX)
    repo, _, quant = body.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(f"{name!r} is not a hub model: give hf:ORG/REPO or hf:ORG/REPO:QUANT, "
                         "e.g. hf:unsloth/Qwen3.5-9B-GGUF:Q4_K_M")
    return HubModel(repo, quant or None)


def ggufs(files: list[str]) -> list[str]:
    # Vision projectors ship beside the weights as GGUFs too; they are never the model.
    return sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower().rsplit("/", 1)[-1])


def quants(files: list[str]) -> list[str]:
    """The names a user would pick among: each file, or each split set once, without its part suffix."""
    return sorted({_SPLIT.sub(".gguf", f) for f in ggufs(files)})


def quant_sizes(sizes: dict[str, int]) -> dict[str, int]:
    """Each pickable model (quants' names, the `.gguf` left off) and its bytes, every part of a split set counted."""
    totals: dict[str, int] = {}
    for name in ggufs(list(sizes)):
        # The file's own name: pick() matches a tag against it, not against its folder.
        key = _SPLIT.sub(".gguf", name).rsplit("/", 1)[-1].removesuffix(".gguf")
        totals[key] = totals.get(key, 0) + sizes[name]
    return dict(sorted(totals.items()))


def pick(files: list[str], quant: str | None, repo: str) -> list[str]:
    """The files to fetch, the first (the one to load) first; every part of a split set."""
    models = ggufs(files)
    if not models:
        raise ValueError(f"{repo} holds no GGUF file; swarm-panel loads GGUF models only")
    for tag in ((quant,) if quant else FALLBACK_QUANTS):
        hits = [f for f in models if tag.lower() in f.rsplit("/", 1)[-1].lower()]
        if hits:
            first = hits[0]
            split = _SPLIT.search(first)
            if not split:
                return [first]
            stem = first[:split.start()]
            return sorted(f for f in models if f.startswith(stem) and _SPLIT.search(f))
    if quant is None:
        # Neither default quant: the first file (its whole split set), named by its own stem.
        return pick(files, _SPLIT.sub("", models[0]).rsplit("/", 1)[-1].removesuffix(".gguf"), repo)
    raise ValueError(f"{repo} has no file for quant {quant!r}; it has: " + ", ".join(quants(files)))
