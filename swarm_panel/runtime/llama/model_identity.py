"""A model file's identity, whatever its path: what a saved llama.cpp state is only valid for.

The same weights copied or moved keep their identity; another file of the same architecture (a
fine-tune, another quantization) gets another. Hashing a whole multi-GB file would cost seconds at
every load, and a GGUF's header alone is shared by fine-tunes of one base. So the identity is a
sha256 of the size, the first 8 MiB (the header and the first tensors) and 1 MiB at each of 16
evenly spaced offsets and at the end: every tensor of a fine-tune differs, so a sample finds it, and
it reads about 32 MiB at most.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

HEAD_BYTES = 8 << 20
SAMPLE_BYTES = 1 << 20
SAMPLES = 16


def model_identity(path: str | os.PathLike[str]) -> str:
    size = Path(path).stat().st_size
    digest = hashlib.sha256(f"gguf size {size}\n".encode())
    with open(path, "rb") as f:
        digest.update(f.read(HEAD_BYTES))
        if size > HEAD_BYTES:
            for i in range(1, SAMPLES + 1):
                f.seek(max(HEAD_BYTES, size * i // (SAMPLES + 1) - SAMPLE_BYTES // 2))
                digest.update(f.read(SAMPLE_BYTES))
            f.seek(max(size - SAMPLE_BYTES, 0))
            digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()
