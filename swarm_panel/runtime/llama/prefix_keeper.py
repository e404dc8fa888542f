"""The llama engine's stored prefixes (runtime.core.prefix_store): a store for the context it has, filled
after the rows marked `store_prefix`, read by RESTORE ops, backed by files (runtime.llama.prefix_files).

A saved sequence state restores only into a context with the same facts (prefix_files.state_facts):
a relayout that changes them (split KV widened to unified, another attention kernel) gets the store of
the new facts, indexed from its folder; the old one's entries stay on disk for when it comes back.
"""

from __future__ import annotations

import ctypes
import logging
import os

import numpy as np

from swarm_panel.runtime.core.prefix_store import PrefixStore, StoredPrefix
from swarm_panel.runtime.llama.memory import MemoryRefused, SequenceMemory
from swarm_panel.runtime.llama.model_identity import model_identity
from swarm_panel.runtime.llama.prefix_files import PrefixFiles, PrefixStoreOptions, default_root, state_facts

log = logging.getLogger(__name__)


class PrefixKeeper:
    def __init__(self, options: PrefixStoreOptions, model_path: str | os.PathLike[str]) -> None:
        self.options = options
        self.root = options.root or default_root()
        self._identity = model_identity(model_path)
        self._files: PrefixFiles | None = None
        self.store: PrefixStore | None = None

    def open(self, memory_kind: str, kv_type: str, flash_attn: str | bool, n_stream: int) -> PrefixStore:
        """The store for a context with these facts: the one held where they are the same."""
        facts = state_facts(self._identity, memory_kind, kv_type, flash_attn, n_stream)
        if self.store is not None and self._files is not None and self._files.facts == facts:
            return self.store
        self.close()
        files = self._files = PrefixFiles(self.root, facts, self.options.disk_budget_bytes)
        store = self.store = PrefixStore(self.options.ram_budget_bytes, self.options.min_tokens, files)
        for tokens, nbytes in files.index():
            store.add_known(tokens, nbytes)
        return store

    def keep(self, memory: SequenceMemory, seq_id: int, tokens: list[int]) -> None:
        """Stores the sequence's whole state, which has seen exactly `tokens`, unless it is stored."""
        key = np.asarray(tokens, dtype=np.int64)
        if self.store.has(key):
            return
        try:
            data = memory.save(seq_id)
        except MemoryRefused as exc:
            log.warning("a prefix of %d tokens is not stored: %s", len(tokens), exc)
            return
        self.store.put(key, data)
        log.info("stored a prefix of %d tokens (%d bytes)", len(tokens), len(data))

    def state(self, entry: StoredPrefix, tokens: list[int], n: int) -> ctypes.Array:
        """The stored state a request whose prompt is `tokens` starts from, its first n tokens compared."""
        if not 0 < n <= entry.num_tokens or not np.array_equal(entry.tokens[:n], np.asarray(tokens[:n])):
            raise MemoryRefused(f"the stored prefix of {entry.num_tokens} tokens is not the request's first {n}")
        data = self.store.state(entry)
        if data is None:
            raise MemoryRefused(f"the stored prefix of {entry.num_tokens} tokens is gone or damaged")
        return data

    def close(self) -> None:
        """Waits for the queued writes."""
        if self._files is not None:
            self._files.close()
