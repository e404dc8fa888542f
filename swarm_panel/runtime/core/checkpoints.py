"""Recurrent-state checkpoints: where a hybrid or recurrent model's sequence can resume exactly.

A recurrent state has seen every token of its sequence and cannot be rolled back, so a sequence's
KV can be reused only up to a position where the state is known: the sequence's own end, or a
checkpoint taken there. A checkpoint depends only on the tokens before it, so the store is keyed by
that token prefix, not by the sequence that made it: any request whose prompt starts with those
tokens can resume from it, whichever sequence holds the matching KV.

The engine owns the store and its bytes: it writes checkpoints after the steps that end at them and
reads them while applying prefix ops. The scheduler reads it between steps (the same thread) to plan
only resumptions that exist. Checkpoints have a byte budget of their own, outside the KV, and are
evicted least recently used first; one for Qwen3.5-9B is about 50 MB.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

Key = tuple[int, int]


def prefix_key(tokens: np.ndarray) -> Key:
    return len(tokens), hash(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())


@dataclass(slots=True, eq=False)
class Checkpoint:
    tokens: np.ndarray
    nbytes: int
    # The engine's snapshot of the recurrent state (None for an engine that only models its cost).
    data: bytes | None


class CheckpointStore:
    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"the checkpoint budget must not be negative, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.num_bytes = 0
        self._entries: OrderedDict[Key, Checkpoint] = OrderedDict()  # coldest first
        # Distinct prefix lengths held, so a lookup hashes one prefix per length, not per entry.
        self._lengths: dict[int, int] = {}
        self.num_made = self.num_restored = self.num_evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def has(self, tokens: np.ndarray) -> bool:
        return prefix_key(tokens) in self._entries

    def get(self, tokens: np.ndarray) -> Checkpoint | None:
        """The checkpoint for exactly this prefix, marked as used."""
        key = prefix_key(tokens)
        entry = self._entries.get(key)
        if entry is not None and np.array_equal(entry.tokens, tokens):
            self._entries.move_to_end(key)
            return entry
        return None

    def longest(self, tokens: np.ndarray, limit: int) -> int:
        """The longest n <= limit with a checkpoint of tokens[:n]; 0 when there is none."""
        for n in sorted(self._lengths, reverse=True):
            if n <= min(limit, len(tokens)):
                entry = self._entries.get(prefix_key(tokens[:n]))
                if entry is not None and np.array_equal(entry.tokens, tokens[:n]):
                    return n
        return 0

    def put(self, tokens: np.ndarray, data: bytes | None, nbytes: int) -> bool:
        """Keeps a checkpoint of tokens, evicting the coldest ones to fit; False if it never fits."""
        key = prefix_key(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        if nbytes > self.budget_bytes:
            return False
        while self.num_bytes + nbytes > self.budget_bytes:
            self._evict_one()
        self._entries[key] = Checkpoint(np.array(tokens, dtype=np.int64), nbytes, data)
        self._lengths[len(tokens)] = self._lengths.get(len(tokens), 0) + 1
        self.num_bytes += nbytes
        self.num_made += 1
        return True

    def clear(self) -> None:
        self._entries.clear()
        self._lengths.clear()
        self.num_bytes = 0

    def _evict_one(self) -> None:
        _, entry = self._entries.popitem(last=False)
        self.num_bytes -= entry.nbytes
        self.num_evicted += 1
        n = len(entry.tokens)
        self._lengths[n] -= 1
        if not self._lengths[n]:
            del self._lengths[n]
        log.debug("checkpoint at %d tokens evicted (budget %d bytes)", n, self.budget_bytes)
