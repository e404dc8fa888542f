"""The prefix-reuse tiers out of KV cells, each holding a sequence's whole state as bytes: finished
sequences parked in host RAM for this run (`ParkedSequences`), and stored prefixes, long shared heads
kept in RAM and on disk across sessions (`PrefixStore`, `StoredHeads`, `PrefixKeeper`).

Parked: llama.cpp attends over every used cell of a unified pool (masked where another sequence owns
it), so a finished sequence left resident slows every live one; one step of 8 lanes with 8 idle
sequences of 400 tokens above them was about 30% slower here. Parked, a finished sequence's whole state
(its KV cells and any recurrent state, `llama_state_seq_get_data`) waits as bytes, and a request that
reuses it gets it back with `llama_state_seq_set_data`: a copy of megabytes instead of a recomputation.

A prefix copied in a unified pool shares cells (`seq_cp` copies none), so parking frees only a
sequence's own cells while a restore copies all of them back: the engine parks a finished sequence
only where at least half of it is its own (runtime.llama.engine). Measured over HTTP, 8 agents: short
unrelated requests 75 against 67 tok/s with parking on; agents on one ~1,000-token system prompt lost
23% when every sequence was parked, which that rule is for.

Split KV gives each finished sequence its lane's stream, so there the cache holds no more sequences
than lanes: in a swarm larger than its lanes, each new turn took the stream of a conversation whose
agent was next in the queue. There the scheduler parks the sequence it evicts for room (a PARK op)
and a later turn restores it into a free stream, as llama-server's `--cache-ram` does; past the
budget the oldest parked state goes.

Stored prefixes, the tier on disk: the whole state of a sequence at the end of a long shared head,
kept across sessions. One thing under three hats: the store of entries and their bytes (`PrefixStore`),
where it meets prompts for the scheduler (`StoredHeads`), and the engine's side, a store per context's
facts filled from a sequence and read back for a RESTORE op (`PrefixKeeper`).

A coding harness opens every session and sub-agent with the same head (its system prompt and tool
list: 8-21k tokens), which a CPU takes minutes to compute. The prefix cache (runtime.reuse.prefix_cache)
keeps finished sequences of this run only; a stored prefix outlives them and the process: the engine
snapshots a sequence's whole state (KV cells and any recurrent state, `llama_state_seq_get_data`) the
moment a prompt chunk ends at such a head, and a later request whose prompt starts with those tokens
gets the state restored instead of computed. On a hybrid model that whole state is the only way to
hand the head on exactly: it holds the recurrent state at the head's end.

The engine owns the store and its bytes; the scheduler reads its tokens between steps (the same
thread) to plan a RESTORE op (runtime.scheduling.prefix_planner). The bytes stay in RAM within a
budget, least recently used out first; a backing (runtime.reuse.stored_files: a file each) keeps them
past RAM and past the process, and gives them back when a request needs them again. An entry is never
consumed by its use: the next session reuses it too.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from swarm_panel.runtime.core.checkpoints import Key, prefix_key
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.reuse.prefix_cache import (
    MIN_MATCH_TOKENS,
    Match,
    as_tokens,
    common_prefix_len,
    head_ends,
    turn_end_array,
)
from swarm_panel.runtime.reuse.stored_files import (
    PrefixFiles,
    PrefixStoreOptions,
    default_root,
    model_identity,
    state_facts,
)

log = logging.getLogger(__name__)


# ----- parked in host RAM -----


@dataclass(slots=True)
class ParkedSequence:
    data: ctypes.Array
    num_tokens: int

    @property
    def nbytes(self) -> int:
        return len(self.data)


class ParkedSequences:
    """Parked states by the request whose sequence they were, within a byte budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.num_bytes = 0
        self._entries: OrderedDict[int, ParkedSequence] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._entries

    def fits(self, nbytes: int) -> bool:
        return self.num_bytes + nbytes <= self.budget_bytes

    def put(self, request_id: int, entry: ParkedSequence) -> None:
        self.pop(request_id)
        self._entries[request_id] = entry
        self.num_bytes += entry.nbytes

    def get(self, request_id: int) -> ParkedSequence | None:
        return self._entries.get(request_id)

    def pop(self, request_id: int) -> ParkedSequence | None:
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            self.num_bytes -= entry.nbytes
        return entry

    def oldest(self) -> int | None:
        """The request id of the state parked longest ago; None when none is."""
        return next(iter(self._entries), None)

    def lengths(self) -> list[int]:
        return [entry.num_tokens for entry in self._entries.values()]

    def clear(self) -> None:
        self._entries.clear()
        self.num_bytes = 0


# ----- stored prefixes -----

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


# ----- where stored prefixes meet prompts (the scheduler's side) -----
# The prefix planner (runtime.scheduling.prefix_planner) asks both: a stored prefix is the third place a
# prompt's prefix can come from, after live and cached sequences, and wins only where it holds more.


class StoredHeads:
    def __init__(self, store: PrefixStore, turn_end_tokens: frozenset[int]) -> None:
        self.store = store
        self._turn_ends = turn_end_array(turn_end_tokens)

    def longest(self, tokens: np.ndarray, limit: int, resume: Callable[[int, int], int] | None) -> Match | None:
        """The stored prefix sharing the most of `tokens` (at most `limit`), compared token by token.

        A restore copies the whole stored state and cuts it back, so a prefix is offered only where at
        least half of it is used; `resume(n, held)` cuts a match back to where a hybrid can resume."""
        best: Match | None = None
        for entry in self.store:
            n = min(common_prefix_len(tokens, entry.tokens), limit)
            if resume is not None and n >= MIN_MATCH_TOKENS:
                n = resume(n, entry.num_tokens)
            if n >= MIN_MATCH_TOKENS and 2 * n >= entry.num_tokens and (best is None or n > best.num_tokens):
                best = Match(entry, n)
        return best

    def store_at(self, request: Request, start: int, end: int) -> int | None:
        """The end of the prompt's head where a chunk over [start, end) should stop so that the engine
        stores it: a head of at least the store's min_tokens, not stored yet; None where there is none."""
        for boundary in head_ends(request, self._turn_ends):
            if (start < boundary <= end and boundary >= self.store.min_tokens
                    and not self.store.has(as_tokens(request.token_ids[:boundary]))):
                return boundary
        return None


class StoredPrefixGone(RuntimeError):
    """A stored prefix a RESTORE op names is not the request's, or its bytes are gone or damaged."""


class PrefixKeeper:
    """The engine's stored prefixes: a store for the context it has, filled after the rows marked
    `store_prefix`, read by RESTORE ops, backed by files (runtime.reuse.stored_files).

    A saved sequence state restores only into a context with the same facts (stored_files.state_facts):
    a relayout that changes them (split KV widened to unified, another attention kernel) gets the store
    of the new facts, indexed from its folder; the old one's entries stay on disk for when it comes back.
    """

    def __init__(self, options: PrefixStoreOptions, model_path: str | os.PathLike[str], build: str) -> None:
        self.options = options
        self.root = options.root or default_root()
        self._identity = model_identity(model_path)
        # The llama.cpp build: a saved state's layout is its own and unversioned.
        self._build = build
        self._files: PrefixFiles | None = None
        self.store: PrefixStore | None = None

    def open(self, memory_kind: str, kv_type: str, flash_attn: str | bool, n_stream: int) -> PrefixStore:
        """The store for a context with these facts: the one held where they are the same."""
        facts = state_facts(self._identity, memory_kind, kv_type, flash_attn, n_stream, self._build)
        if self.store is not None and self._files is not None and self._files.facts == facts:
            return self.store
        self.close()
        files = self._files = PrefixFiles(self.root, facts, self.options.disk_budget_bytes)
        store = self.store = PrefixStore(self.options.ram_budget_bytes, self.options.min_tokens, files)
        for tokens, nbytes in files.index():
            store.add_known(tokens, nbytes)
        return store

    def keep(self, tokens: list[int], save: Callable[[], ctypes.Array | None]) -> None:
        """Stores the state `save` gives (a sequence's whole state, which has seen exactly `tokens`),
        unless it is stored; `save` gives None where the memory refused it."""
        key = np.asarray(tokens, dtype=np.int64)
        if self.store.has(key):
            return
        data = save()
        if data is None:
            return
        self.store.put(key, data)
        log.info("stored a prefix of %d tokens (%d bytes)", len(tokens), len(data))

    def state(self, entry: StoredPrefix, tokens: list[int], n: int) -> ctypes.Array:
        """The stored state a request whose prompt is `tokens` starts from, its first n tokens compared."""
        if not 0 < n <= entry.num_tokens or not np.array_equal(entry.tokens[:n], np.asarray(tokens[:n])):
            raise StoredPrefixGone(f"the stored prefix of {entry.num_tokens} tokens is not the request's first {n}")
        data = self.store.state(entry)
        if data is None:
            raise StoredPrefixGone(f"the stored prefix of {entry.num_tokens} tokens is gone or damaged")
        return data

    def close(self) -> None:
        """Waits for the queued writes."""
        if self._files is not None:
            self._files.close()
