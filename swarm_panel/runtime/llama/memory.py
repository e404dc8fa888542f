"""llama.cpp memory operations by model kind, each checked, none allowed to leave a wrong state behind.

An attention model's KV is a set of cells per position: any prefix of a sequence can be cut or
copied. A hybrid (Qwen3.5: Gated DeltaNet layers beside attention layers) or recurrent model also
holds one fixed-size state per sequence that has seen every token, and llama.cpp treats it so:
- `seq_rm(s, p, -1)` with p inside the sequence returns False and changes nothing;
- a partial `seq_cp(src, dst, 0, p)` copies the state whole, so dst would decode from p with a
  state that saw src's tokens past p: wrong tokens and no error (with split KV it aborts instead,
  so copies between streams go through `copy_across`);
- `llama_memory_seq_pos_max` is the smaller of the two parts' ends, so a state that is ahead of the
  KV still passes a position check.
So on those kinds a prefix shorter than the sequence is only reused by restoring a checkpoint of
the recurrent state taken at exactly that prefix (runtime.core.checkpoints), and this module tracks
where each sequence's state stands, so the engine can check a row against it.

Checking a row against the KV asks llama.cpp only after an operation here changed the sequence:
a decode step moves each sequence's end to where its row ended, which this module records, so a
step's checks cost no call into llama.cpp (`mismatches` compares the record with llama.cpp's).

An operation the memory cannot do raises MemoryRefused and leaves the sequences as they were (or,
for a copy, leaves the destination empty): the engine turns it into a recomputation, never into
wrong tokens.
"""

from __future__ import annotations

import ctypes
import logging

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore

log = logging.getLogger(__name__)

ATTENTION, HYBRID, RECURRENT = "attention", "hybrid", "recurrent"
_PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


class MemoryRefused(RuntimeError):
    """The memory cannot put a sequence in the asked state; nothing wrong was left behind."""


def memory_kind(model: llama_cpp.llama_model_p) -> str:
    if llama_cpp.llama_model_is_hybrid(model):
        return HYBRID
    if llama_cpp.llama_model_is_recurrent(model):
        return RECURRENT
    return ATTENTION


class SequenceMemory:
    def __init__(self, ctx: llama_cpp.llama_context_p, kind: str, checkpoints: CheckpointStore | None) -> None:
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.kind = kind
        # A recurrent state is exact only at the position it has reached.
        self.exact_only = kind != ATTENTION
        self.checkpoints = checkpoints
        # seq id -> tokens its recurrent state has seen (absent: none); kept only when exact_only.
        self._state_end: dict[int, int] = {}
        # seq id -> tokens its KV holds, as llama.cpp last said or decodes since have left it
        # (absent: ask llama.cpp). Every operation but a decode forgets the sequence's entry first.
        self._kv_end: dict[int, int] = {}
        # Size of one sequence's recurrent state snapshot, known after the first one.
        self.state_bytes = 0

    def held(self, seq_id: int) -> int:
        return llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id) + 1

    def check_row(self, seq_id: int, start: int) -> None:
        held = self._kv_end.get(seq_id)
        if held is None:
            held = self._kv_end[seq_id] = self.held(seq_id)
        if start != held:
            raise ValueError(f"row starts at position {start} but the KV cache holds {held} tokens of it")
        state = self._state_end.get(seq_id, 0)
        if self.exact_only and state != start:
            raise ValueError(f"row starts at position {start} but the recurrent state has seen {state} tokens")

    def advanced(self, seq_id: int, end: int) -> None:
        """A decode computed this sequence up to `end` (or an operation here left it there)."""
        self._kv_end[seq_id] = end
        if self.exact_only:
            self._state_end[seq_id] = end

    def mismatches(self) -> dict[int, tuple[int, int]]:
        """seq id -> (recorded, llama.cpp's) KV end, for each sequence where the two differ."""
        actual = {seq_id: self.held(seq_id) for seq_id in self._kv_end}
        return {seq_id: (end, actual[seq_id]) for seq_id, end in self._kv_end.items() if end != actual[seq_id]}

    def drop(self, seq_id: int) -> None:
        self._kv_end.pop(seq_id, None)
        # llama.cpp promises that removing a whole sequence never fails; a False would leave cells
        # that a later sequence on this id would attend over.
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq_id, -1, -1):
            raise RuntimeError(f"llama.cpp could not free sequence {seq_id}")
        self._state_end.pop(seq_id, None)

    def discard_from(self, seq_id: int, start: int) -> None:
        """Undoes a failed decode's cells past `start`; a state that cannot roll back loses the sequence."""
        self._kv_end.pop(seq_id, None)
        if llama_cpp.llama_memory_seq_rm(self._mem, seq_id, start, -1) and self._state_end.get(seq_id, 0) <= start:
            return
        log.warning("sequence %d cannot roll back to %d after a failed decode; dropping it", seq_id, start)
        self.drop(seq_id)

    def trim(self, seq_id: int, n: int, tokens: list[int]) -> None:
        """Makes the sequence hold exactly its first n tokens (`tokens` are what it holds)."""
        self._kv_end.pop(seq_id, None)
        held = self.held(seq_id)
        if n > held:
            raise MemoryRefused(f"sequence {seq_id} holds {held} tokens, fewer than the {n} to keep")
        if self.exact_only and self._state_end.get(seq_id, 0) != n:
            self._restore(seq_id, tokens, n)
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq_id, n, -1):
            raise MemoryRefused(f"llama.cpp refused to cut sequence {seq_id} back to {n} tokens")
        self.advanced(seq_id, n)

    def copy(self, src: int, dst: int, n: int, tokens: list[int]) -> None:
        """Gives the empty sequence dst the first n tokens of src (unified KV: cells are shared, not copied)."""
        self._kv_end.pop(dst, None)
        held = self.held(src)
        if not 0 < n <= held:
            raise MemoryRefused(f"a prefix of {n} tokens was asked of a sequence holding {held}")
        whole = n == held and self._state_end.get(src, 0) == held
        if self.exact_only and not whole and not self._checkpoint(tokens, n):
            raise MemoryRefused(f"no recurrent-state checkpoint at {n} tokens")
        # A whole copy shares src's state as it is; a partial one gets the checkpoint's state below.
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, -1 if whole else n)
        try:
            if self.exact_only and not whole:
                self._restore(dst, tokens, n)
            if self.held(dst) != n:
                raise MemoryRefused(f"copying {n} tokens left sequence {dst} holding {self.held(dst)}")
        except MemoryRefused:
            self.drop(dst)
            raise
        self.advanced(dst, n)

    def copy_across(self, src: int, dst: int, n: int, tokens: list[int]) -> None:
        """Gives the empty sequence dst, in another split-KV stream, the first n tokens of src.

        llama.cpp copies between streams only whole streams (and not at all on hybrid models), so
        src's state goes through host RAM: a copy of its cells, far cheaper than computing n tokens.
        """
        held = self.held(src)
        if not 0 < n <= held:
            raise MemoryRefused(f"a prefix of {n} tokens was asked of a sequence holding {held}")
        state = self._state_end.get(src, 0)
        if self.exact_only and state != n and not self._checkpoint(tokens, n):
            raise MemoryRefused(f"no recurrent-state checkpoint at {n} tokens")
        self.load(dst, self.save(src), held)
        if self.exact_only:
            # The restored recurrent state is src's, wherever that stood.
            self._state_end[dst] = state
        try:
            self.trim(dst, n, tokens)
        except MemoryRefused:
            self.drop(dst)
            raise

    def save(self, seq_id: int) -> ctypes.Array:
        """The sequence's whole state (KV cells and any recurrent state), to park in host RAM."""
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq_id)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buffer, size, seq_id)
        if written != size:
            raise MemoryRefused(f"saving sequence {seq_id} wrote {written} of {size} bytes")
        return buffer

    def load(self, seq_id: int, data: ctypes.Array, n: int) -> None:
        """Puts a saved state of n tokens into the empty sequence seq_id; on failure seq_id stays empty."""
        self._kv_end.pop(seq_id, None)
        if llama_cpp.llama_state_seq_set_data(self._ctx, data, len(data), seq_id) == 0 or self.held(seq_id) != n:
            self.drop(seq_id)
            raise MemoryRefused(f"llama.cpp could not restore a parked sequence of {n} tokens into sequence {seq_id}")
        self.advanced(seq_id, n)

    def snapshot(self, seq_id: int, tokens: list[int]) -> None:
        """Keeps a checkpoint of the sequence's recurrent state, which has seen exactly `tokens`."""
        if not self.exact_only or self.checkpoints is None:
            return
        key = np.asarray(tokens, dtype=np.int64)
        if self.checkpoints.has(key):
            return
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, seq_id, _PARTIAL)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data_ext(self._ctx, buffer, size, seq_id, _PARTIAL)
        if written != size:
            log.warning("snapshot of sequence %d wrote %d of %d bytes; no checkpoint kept", seq_id, written, size)
            return
        self.state_bytes = size
        if not self.checkpoints.put(key, bytes(buffer), size):
            log.warning("a %d-byte checkpoint exceeds the checkpoint budget of %d bytes", size,
                        self.checkpoints.budget_bytes)

    def _checkpoint(self, tokens: list[int], n: int):
        if self.checkpoints is None:
            return None
        return self.checkpoints.get(np.asarray(tokens[:n], dtype=np.int64))

    def _restore(self, seq_id: int, tokens: list[int], n: int) -> None:
        """Sets the sequence's recurrent state to the checkpoint of tokens[:n]; its KV is untouched."""
        self._kv_end.pop(seq_id, None)
        checkpoint = self._checkpoint(tokens, n)
        if checkpoint is None or checkpoint.data is None:
            raise MemoryRefused(f"no recurrent-state checkpoint at {n} tokens")
        data = (ctypes.c_uint8 * checkpoint.nbytes).from_buffer_copy(checkpoint.data)
        if llama_cpp.llama_state_seq_set_data_ext(self._ctx, data, checkpoint.nbytes, seq_id, _PARTIAL) == 0:
            # llama.cpp clears what it had restored; the sequence's KV is intact but its state is gone.
            self._state_end.pop(seq_id, None)
            raise MemoryRefused(f"llama.cpp could not restore the checkpoint at {n} tokens into sequence {seq_id}")
        self.checkpoints.num_restored += 1
        self._state_end[seq_id] = n
