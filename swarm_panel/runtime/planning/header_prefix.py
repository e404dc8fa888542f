"""A model's shape from the first bytes of its GGUF: the header and tensor index, without the weights.

The bytes sit at the start of a sparse file as long as the whole one (no disk spent), so the gguf package reads
it as it reads a downloaded file and the plan is the same; the tail past the tensor index is never read.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gguf

from swarm_panel.runtime.planning.shape import ModelShape, read_shape

MAGIC = b"GGUF"


def header_end(path: Path) -> int | None:
    """Where the tensor data starts; None where the bytes there do not parse as a GGUF header yet."""
    try:
        return int(gguf.GGUFReader(path).data_offset)
    except (ValueError, IndexError, OverflowError, KeyError, MemoryError):
        return None


def shape_from_prefix(prefix: bytes, total_size: int, name: str) -> tuple[ModelShape | None, int]:
    """The shape where `prefix` holds the whole header, else None and how many bytes to fetch next."""
    if len(prefix) < len(MAGIC) or prefix[:4] != MAGIC:
        raise ValueError(f"{name} is not a GGUF file (it starts {prefix[:4]!r}, not {MAGIC!r})")
    with tempfile.TemporaryDirectory(prefix="swarm-panel-header-") as folder:
        path = Path(folder) / Path(name).name
        with open(path, "wb") as f:
            f.write(prefix)
            f.truncate(max(total_size, len(prefix)))
        end = header_end(path)
        if end is None or end > len(prefix):
            if len(prefix) >= total_size:
                raise ValueError(f"{name}: the GGUF header does not parse")
            return None, min(total_size, max(2 * len(prefix), (end or 0) + 4096))
        return read_shape(path), len(prefix)
