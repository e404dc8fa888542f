"""Stored prefixes: the whole state of a sequence at the end of a long shared head, kept across sessions.

A coding harness opens every session and sub-agent with the same head (its system prompt and tool
list: 8-21k tokens), which a CPU takes minutes to compute. The prefix cache (runtime.reuse.prefix_cache)
keeps finished sequences of this run only; a stored prefix outlives them and the process: the engine
snapshots a sequence's whole state (KV cells and any recurrent state, `llama_state_seq_get_data`) the
moment a prompt chunk ends at such a head, and a later request whose prompt starts with those tokens
gets the state restored instead of computed. On a hybrid model that whole state is the only way to
hand the head on exactly: it holds the recurrent state at the head's end.

The engine owns the store and its bytes; the scheduler reads its tokens between steps (the same
thread) to plan a RESTORE op (runtime.scheduling.prefix_planner). The bytes stay in RAM within a
budget, least recently used out first; a backing (runtime.llama.prefix_files: a file each) keeps them
past RAM and past the process, and gives them back when a request needs them again. An entry is never
consumed by its use: the next session reuses it too.
"""

from __future__ import annotations

import ctypes
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from swarm_panel.runtime.core.checkpoints import Key, prefix_key

log = logging.getLogger(__name__)


class PrefixBacking(Protocol):
    """Where stored prefixes live past RAM; every call names an entry by its exact tokens."""

    def write(self, tokens: np.ndarray, data: ctypes.Array) -> None:
        """Keeps the state (queued: it may return before the bytes are written)."""
        ...

    def read(self, tokens: np.ndarray) -> ctypes.Array | None:
        """The state stored for exactly these tokens, checked; None where it is gone or damaged."""
        ...

    def touch(self, tokens: np.ndarray) -> None:
        """The entry was used: it goes last when room is made."""
        ...


@dataclass(slots=True, eq=False)
class StoredPrefix:
    # Token ids at positions 0..len-1 of the stored state.
    tokens: np.ndarray
    nbytes: int
    # The state in RAM; None: only the backing holds it.
    data: ctypes.Array | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


class PrefixStore:
    def __init__(self, budget_bytes: int, min_tokens: int, backing: PrefixBacking | None = None) -> None:
        if budget_bytes < 0 or min_tokens < 1:
            raise ValueError(f"a prefix store needs a budget >= 0 and min_tokens >= 1, got {budget_bytes}, "
                             f"{min_tokens}")
        self.budget_bytes = budget_bytes
        # Heads shorter than this are not stored: they are cheap to compute, and each entry is compared
        # with every admitted prompt.
        self.min_tokens = min_tokens
        self.backing = backing
        # Bytes held in RAM (entries whose state only the backing holds count nothing).
        self.num_bytes = 0
        self._entries: OrderedDict[Key, StoredPrefix] = OrderedDict()  # coldest first
        self.num_stored = self.num_restored = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries.values())

    def has(self, tokens: np.ndarray) -> bool:
        return self._find(tokens) is not None

    def add_known(self, tokens: np.ndarray, nbytes: int) -> None:
        """An entry the backing already holds (found at load): its tokens now, its state when used."""
        self._entries[prefix_key(tokens)] = StoredPrefix(np.array(tokens, dtype=np.int64), nbytes)

    def put(self, tokens: np.ndarray, data: ctypes.Array) -> None:
        """Stores the state of exactly `tokens`: kept in RAM within the budget, and handed to the backing."""
        if self._find(tokens) is not None:
            return
        entry = StoredPrefix(np.array(tokens, dtype=np.int64), len(data))
        self._entries[prefix_key(entry.tokens)] = entry
        self.num_stored += 1
        if self.backing is not None:
            self.backing.write(entry.tokens, data)
        self._hold(entry, data)
        if entry.data is None and self.backing is None:
            # Neither RAM nor a backing can keep it.
            self._forget(entry)
            log.warning("a stored prefix of %d tokens (%d bytes) exceeds the prefix store's RAM budget of %d "
                        "bytes and has no disk to go to", entry.num_tokens, entry.nbytes, self.budget_bytes)

    def state(self, entry: StoredPrefix) -> ctypes.Array | None:
        """The entry's state, from RAM or read back from the backing, marked as used; None (and the entry
        forgotten) where the backing lost it or finds it damaged."""
        key = prefix_key(entry.tokens)
        if self._entries.get(key) is not entry:
            return None
        self._entries.move_to_end(key)
        if self.backing is not None:
            self.backing.touch(entry.tokens)
        if entry.data is not None:
            return entry.data
        data = self.backing.read(entry.tokens) if self.backing is not None else None
        if data is None or len(data) != entry.nbytes:
            self._forget(entry)
            return None
        self._hold(entry, data)
        return data

    def _hold(self, entry: StoredPrefix, data: ctypes.Array) -> None:
        """Keeps the entry's bytes in RAM where the budget allows, the least recently used making way;
        an entry pushed out keeps only what its backing holds."""
        if entry.nbytes > self.budget_bytes:
            return
        for other in list(self._entries.values()):
            if self.num_bytes + entry.nbytes <= self.budget_bytes:
                break
            if other is not entry and other.data is not None:
                self._drop_data(other)
        entry.data = data
        self.num_bytes += entry.nbytes

    def _drop_data(self, entry: StoredPrefix) -> None:
        entry.data = None
        self.num_bytes -= entry.nbytes
        if self.backing is None:
            self._forget(entry)

    def _find(self, tokens: np.ndarray) -> StoredPrefix | None:
        entry = self._entries.get(prefix_key(tokens))
        return entry if entry is not None and np.array_equal(entry.tokens, tokens) else None

    def _forget(self, entry: StoredPrefix) -> None:
        if entry.data is not None:
            entry.data = None
            self.num_bytes -= entry.nbytes
        self._entries.pop(prefix_key(entry.tokens), None)
