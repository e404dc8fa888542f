"""Stored prefixes on disk (runtime.reuse.saved_states): a file each, beside the engine's other cached
verdicts, within a byte budget.

The folder is platformdirs' user cache path for "swarm-panel" (XDG_CACHE_HOME on Linux), under
`prefix-store/`, one subfolder per key: a sha256 of the facts a saved llama.cpp sequence state is valid
for (`state_facts`). A file is

    MAGIC (8 bytes) | format version (u32) | header length (u32) | header (JSON) |
    tokens (int32 each) | state (llama_state_seq_get_data's bytes)

and its header holds the facts again, the token count, the state's length and its CRC-32. A file whose
magic, version, facts, length, tokens or CRC do not match what is asked is never loaded: it is
removed. Its name is a hash of its tokens, and a lookup compares the tokens themselves.

Files are written on a thread of their own (a 21k-token head of a small model is ~0.5 GB: seconds of
writing the engine thread would otherwise stall on), through runtime.core.careful_write: to a temporary
name renamed into place, so a reader never sees half a file; a full or read-only disk leaves no temp
file and costs only the reuse after a restart. A killed writer's temp file goes at the next load. Past
the disk budget the least recently used files go, across every model's subfolder (a use touches the file).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from swarm_panel.runtime.core.careful_write import atomic_open, remove_dead_temps

log = logging.getLogger(__name__)

MAGIC = b"SPPREFIX"
FORMAT_VERSION = 1
_FIXED = struct.Struct("<8sII")
SUFFIX = ".prefix"
# Longer headers are not ours.
MAX_HEADER_BYTES = 1 << 16
# A temporary file older than this was left by a writer that died.
STALE_TEMP_S = 3600.0
# What a folder that cannot be written costs (careful_write's warning).
LOST = "prefixes will be recomputed after a restart"


@dataclass(frozen=True, slots=True)
class PrefixStoreOptions:
    """What the llama engine's prefix store may hold (runtime.reuse.saved_states)."""

    ram_budget_bytes: int
    disk_budget_bytes: int
    min_tokens: int
    # None: the user's cache folder (`default_root`).
    root: Path | None = None


def default_root() -> Path:
    return platformdirs.user_cache_path("swarm-panel") / "prefix-store"


def state_facts(model_identity: str, memory_kind: str, kv_type: str, flash_attn: str | bool,
                n_stream: int, build: str) -> dict[str, Any]:
    """What `llama_state_seq_set_data` needs to match. The model (layer count and row sizes), the memory
    kind (a hybrid's state adds the recurrent part), the KV types (checked per layer), V's transposition
    (flash attention off transposes it; checked), and the context's stream count (1 unified, one per
    sequence split: checked, "n_stream mismatch"). n_ctx is not: a state restores into any context with
    cells enough, and one without them refuses it. The llama.cpp build, since the state's layout is
    its own and unversioned."""
    return {"model": model_identity, "memory": memory_kind, "kv_type": kv_type, "flash_attn": str(flash_attn),
            "n_stream": n_stream, "llama_cpp": build}


# A model file's identity (`model_identity`) reads its head and samples of its body.
HEAD_BYTES = 8 << 20
SAMPLE_BYTES = 1 << 20
SAMPLES = 16


def model_identity(path: str | os.PathLike[str]) -> str:
    """A model file's identity, whatever its path: what a saved llama.cpp state is only valid for.

    The same weights copied or moved keep their identity; another file of the same architecture (a
    fine-tune, another quantization) gets another. Hashing a whole multi-GB file would cost seconds at
    every load, and a GGUF's header alone is shared by fine-tunes of one base. So the identity is a
    sha256 of the size, the first 8 MiB (the header and the first tensors) and 1 MiB at each of 16
    evenly spaced offsets and at the end: every tensor of a fine-tune differs, so a sample finds it, and
    it reads about 32 MiB at most."""
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


def _name(tokens: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:32] + SUFFIX


class PrefixFiles:
    """A runtime.reuse.saved_states.PrefixBacking in one key's folder; `close` waits for queued writes."""

    def __init__(self, root: Path, facts: dict[str, Any], disk_budget_bytes: int) -> None:
        self.root = root
        self.facts = facts
        key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
        self.folder = root / key
        self.disk_budget_bytes = disk_budget_bytes
        self._queue: queue.Queue[tuple[np.ndarray, ctypes.Array] | None] = queue.Queue()
        self._writer: threading.Thread | None = None

    # ----- found at load -----

    def index(self) -> list[tuple[np.ndarray, int]]:
        """(tokens, state bytes) of every good file in the folder, least recently used first; files that
        are not good are removed."""
        found: list[tuple[float, np.ndarray, int]] = []
        for temp in remove_dead_temps(self.folder):
            log.warning("stored prefix %s removed: left by a writer that died", temp.name)
        for path in self.folder.glob("*" + SUFFIX):
            try:
                with open(path, "rb") as f:
                    header = self._header(f, path)
                    tokens = self._tokens(f, header) if header is not None else None
                mtime = path.stat().st_mtime
            except OSError as exc:
                log.warning("stored prefix %s unreadable (%s)", path.name, exc)
                continue
            if tokens is None or path.name != _name(tokens):
                self._remove(path, "its tokens are not what its name says" if tokens is not None else None)
                continue
            found.append((mtime, tokens, header["state_bytes"]))
        found.sort(key=lambda item: item[0])
        if found:
            log.info("%d stored prefixes on disk for this model and layout (%s)", len(found), self.folder)
        return [(tokens, nbytes) for _, tokens, nbytes in found]

    def _header(self, f, path: Path) -> dict[str, Any] | None:
        """The file's header where its magic, version, facts and length are this store's; None (and the
        file removed by the caller) where not."""
        fixed = f.read(_FIXED.size)
        if len(fixed) != _FIXED.size:
            return self._bad(path, "truncated")
        magic, version, length = _FIXED.unpack(fixed)
        if magic != MAGIC or version != FORMAT_VERSION or length > MAX_HEADER_BYTES:
            return self._bad(path, f"not format {FORMAT_VERSION}")
        try:
            header = json.loads(f.read(length))
            tokens, state = int(header["num_tokens"]), int(header["state_bytes"])
        except (ValueError, KeyError, TypeError):
            return self._bad(path, "a damaged header")
        if header.get("facts") != self.facts:
            return self._bad(path, "another model or layout")
        if os.fstat(f.fileno()).st_size != _FIXED.size + length + 4 * tokens + state:
            return self._bad(path, "truncated or overlong")
        return header

    @staticmethod
    def _tokens(f, header: dict[str, Any]) -> np.ndarray:
        n = header["num_tokens"]
        return np.frombuffer(f.read(4 * n), dtype="<i4").astype(np.int64)

    @staticmethod
    def _bad(path: Path, why: str) -> None:
        """Says why a file is not loaded; the caller removes it."""
        log.warning("stored prefix %s is not loaded and goes: %s", path.name, why)

    # ----- PrefixBacking -----

    def read(self, tokens: np.ndarray) -> ctypes.Array | None:
        path = self.folder / _name(tokens)
        try:
            with open(path, "rb") as f:
                header = self._header(f, path)
                if header is None:
                    self._remove(path, None)
                    return None
                if not np.array_equal(self._tokens(f, header), tokens):
                    self._remove(path, "its tokens differ from the request's")
                    return None
                data = (ctypes.c_uint8 * header["state_bytes"])()
                if f.readinto(data) != len(data) or zlib.crc32(data) != header["state_crc32"]:
                    self._remove(path, "its state does not match its checksum")
                    return None
        except OSError as exc:
            log.warning("stored prefix %s unreadable (%s)", path.name, exc)
            return None
        return data

    def touch(self, tokens: np.ndarray) -> None:
        try:
            os.utime(self.folder / _name(tokens))
        except OSError:
            pass

    def write(self, tokens: np.ndarray, data: ctypes.Array) -> None:
        if len(data) + 4 * len(tokens) > self.disk_budget_bytes:
            log.info("a stored prefix of %d tokens (%d bytes) is more than the disk budget of %d bytes: "
                     "kept in RAM only", len(tokens), len(data), self.disk_budget_bytes)
            return
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_queued, name="prefix-store writer", daemon=True)
            self._writer.start()
        self._queue.put((tokens, data))

    def close(self) -> None:
        """Waits for the queued writes."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None

    # ----- the writer thread -----

    def _write_queued(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._write(*item)
                self._keep_within_budget()
            except OSError as exc:
                log.warning("a stored prefix of %d tokens was not written: %s", len(item[0]), exc)

    def _write(self, tokens: np.ndarray, data: ctypes.Array) -> None:
        header = json.dumps({"facts": self.facts, "num_tokens": len(tokens), "state_bytes": len(data),
                             "state_crc32": zlib.crc32(data)}).encode()
        with atomic_open(self.folder / _name(tokens), "wb", lost=LOST) as target:
            if target.file is None:
                return
            target.file.write(_FIXED.pack(MAGIC, FORMAT_VERSION, len(header)))
            target.file.write(header)
            target.file.write(np.asarray(tokens, dtype="<i4").tobytes())
            target.file.write(memoryview(data))
        if target.ok:
            log.info("stored a prefix of %d tokens on disk (%d bytes)", len(tokens), len(data))

    def _keep_within_budget(self) -> None:
        """Removes the least recently used files, every model's, past the disk budget."""
        files = []
        now = time.time()
        for path in self.root.glob("*/*"):
            try:
                stat = path.stat()
            except OSError:
                continue
            if path.name.endswith(".tmp") and now - stat.st_mtime > STALE_TEMP_S:
                self._remove(path, "left by a writer that died")
            elif path.name.endswith(SUFFIX):
                files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.disk_budget_bytes:
                break
            self._remove(path, None)
            log.info("stored prefix %s removed: the disk budget of %d bytes", path.name, self.disk_budget_bytes)
            total -= size

    @staticmethod
    def _remove(path: Path, why: str | None) -> None:
        if why is not None:
            log.warning("stored prefix %s removed: %s", path.name, why)
        try:
            path.unlink()
        except OSError:
            pass
