"""Finished sequences parked in host RAM: what the engine keeps for prefix reuse out of its KV cells.

llama.cpp attends over every used cell of a unified pool (masked where another sequence owns it), so
a finished sequence left resident slows every live one; one step of 8 lanes with 8 idle sequences of
400 tokens above them was about 30% slower here. Parked, a finished sequence's whole state (its KV
cells and any recurrent state, `llama_state_seq_get_data`) waits as bytes, and a request that reuses
it gets it back with `llama_state_seq_set_data`: a copy of megabytes instead of a recomputation.

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
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass


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
