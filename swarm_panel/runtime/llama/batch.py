"""A llama_batch whose arrays numpy owns, filled a whole step at a time with array operations.

llama_batch_init gives every token its own malloc'd seq_id array, so a step costs one ctypes store
per token to name its sequence. Here each token's seq_id pointer aims, once and for good, at its own
cell of one int32 array: naming the sequences of a step is one numpy assignment, like the tokens,
positions and logits flags beside it. Every token belongs to exactly one sequence (n_seq_id = 1).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np


class TokenBatch:
    def __init__(self, size: int) -> None:
        self.size = size
        self.tokens = np.zeros(size, dtype=np.int32)
        self.positions = np.zeros(size, dtype=np.int32)
        self.seq_ids = np.zeros(size, dtype=np.int32)
        self.logits = np.zeros(size, dtype=np.int8)
        self._n_seq_id = np.ones(size, dtype=np.int32)
        # Null-terminated, as llama_batch_init leaves it.
        self._seq_id_ptrs = np.zeros(size + 1, dtype=np.uintp)
        self._seq_id_ptrs[:size] = self.seq_ids.ctypes.data + self.seq_ids.itemsize * np.arange(size, dtype=np.uintp)
        self._ramp = np.arange(size, dtype=np.int32)
        # Rows whose logits the last fill asked for.
        self.num_outputs = 0
        # The struct holds raw pointers into the arrays above, which live as long as this object.
        self.batch = llama_cpp.llama_batch(
            n_tokens=0,
            token=self.tokens.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token)),
            embd=None,
            pos=self.positions.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_pos)),
            n_seq_id=self._n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=self._seq_id_ptrs.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(llama_cpp.llama_seq_id))),
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )

    def fill(self, tokens: list[int], lengths: list[int], starts: list[int], seq_ids: list[int],
             ends: list[int], outputs: list[int]) -> None:
        """Lays out consecutive rows: row i holds lengths[i] of `tokens` (all rows' tokens in order)
        for sequence seq_ids[i] from position starts[i], ending at batch index ends[i] (exclusive);
        logits are computed at the batch indices in `outputs` only."""
        n = len(tokens)
        if n > self.size:
            raise ValueError(f"a batch of {n} tokens exceeds its {self.size} slots")
        self.tokens[:n] = tokens
        if n == len(lengths):
            # One token a row (a decode step): each row's start is its position.
            self.positions[:n] = starts
            self.seq_ids[:n] = seq_ids
        else:
            counts = np.asarray(lengths)
            # Token j of a row sits at batch index first+j and position start+j: index minus (first - start).
            shift = np.asarray(ends) - counts - np.asarray(starts)
            np.subtract(self._ramp[:n], np.repeat(shift, counts), out=self.positions[:n], casting="unsafe")
            self.seq_ids[:n] = np.repeat(np.asarray(seq_ids, dtype=np.int32), counts)
        self.logits[:n] = 0
        self.logits[outputs] = 1
        self.num_outputs = len(outputs)
        self.batch.n_tokens = n
