"""One llama.cpp context on the loaded model, in one KV layout, everything sized by it, and the memory
operations on its sequences.

Sequence ids, unified KV: live requests use ids 0..max_lanes-1; finished sequences kept for prefix
reuse use ids max_lanes..max_lanes+cache_slots-1. Split KV: each id is its own stream of
n_ctx / n_seq_max cells, cached sequences included, and a cached sequence keeps the stream its lane had.

A relayout (runtime.llama.engine) closes the context and opens another: the layout, and the attention
kernel, are fixed per context in llama.cpp.

The context's llama_batch (TokenBatch, below): arrays numpy owns, filled a whole step at a time with
array operations; each token's seq_id pointer aims once and for good at its own cell of one int32 array.

The memory operations (SequenceMemory, below) go by model kind, each checked, none allowed to leave a
wrong state behind.

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
from dataclasses import dataclass

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.llama.cpu_tuning.followers import CallCost
from swarm_panel.runtime.llama.model import ATTENTION, LlamaModel, ModelLoadError, on_cpu, take_recent_problems
from swarm_panel.runtime.reuse.saved_states import PrefixKeeper, PrefixStore

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1, False: 0, True: 1}
_PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

log = logging.getLogger(__name__)


def resolve_flash_attn(flash_attn: str | bool, n_gpu_layers: int, kv_type: str) -> str | bool:
    """'auto' on a CPU-only run with an F16 cache means off here: which kernel wins depends on the CPU,
    and app.service.engine_factory asks runtime.llama.cpu_tuning.flash_attn_probe, which times both on this machine, before it builds
    an engine; an engine built directly keeps the plain path, the faster one on most CPUs measured.
    Elsewhere llama.cpp's own choice (GPUs, and a quantized V cache, which needs it)."""
    if flash_attn == "auto" and kv_type == "f16" and on_cpu(n_gpu_layers):
        return "off"
    return flash_attn


@dataclass(frozen=True, slots=True)
class Layout:
    """The sequence ids a context has, and its attention kernel."""

    kv_unified: bool
    max_lanes: int
    # Finished sequences kept for reuse beside the lanes.
    cache_slots: int
    flash_attn: str | bool

    @classmethod
    def checked(cls, kv_unified: bool, max_lanes: int, cache_slots: int | None, flash_attn: str | bool) -> Layout:
        max_seqs = llama_cpp.llama_max_parallel_sequences()
        if not kv_unified:
            # No ids set aside for the cache: a cached sequence keeps its lane's stream.
            cache_slots = max_lanes if cache_slots is None else cache_slots
            if not 0 <= cache_slots <= max_lanes:
                raise ValueError(f"with split KV, cache_slots must be within 0..{max_lanes}, got {cache_slots}")
        else:
            # As many cached sequences as lanes, within llama.cpp's limit on sequence ids.
            cache_slots = min(max_lanes, max_seqs - max_lanes) if cache_slots is None else cache_slots
            if not 0 <= cache_slots <= max_seqs - max_lanes:
                raise ValueError(f"cache_slots must be within 0..{max_seqs - max_lanes} beside {max_lanes} lanes, "
                                 f"got {cache_slots}")
        return cls(kv_unified, max_lanes, cache_slots, flash_attn)

    @property
    def n_seq_max(self) -> int:
        """Live plus cached sequences held at once (llama.cpp's n_seq_max)."""
        return self.max_lanes + self.cache_slots if self.kv_unified else self.max_lanes


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """What every context of an engine shares, whatever its layout."""

    n_ctx: int
    n_batch: int
    kv_type: str
    n_gpu_layers: int
    backend_sampling: bool
    checkpoint_budget_bytes: int

    @classmethod
    def checked(cls, n_ctx: int, n_batch: int, kv_type: str, n_gpu_layers: int, backend_sampling: bool,
                checkpoint_budget_bytes: int, flash_attn: str | bool) -> ContextSettings:
        if kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {sorted(KV_TYPES)}, got {kv_type!r}")
        if flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be 'auto', 'on' or 'off', got {flash_attn!r}")
        if n_batch < 1 or n_ctx < 1:
            raise ValueError(f"n_batch and n_ctx must be positive, got {n_batch} and {n_ctx}")
        return cls(n_ctx, n_batch, kv_type, n_gpu_layers, backend_sampling, checkpoint_budget_bytes)


class LlamaContext:
    def __init__(self, model: LlamaModel, settings: ContextSettings, layout: Layout, n_threads: int,
                 stored: PrefixKeeper | None) -> None:
        self.layout = layout
        self.ptr = new_context(model, settings, layout, n_threads)
        self.mem = llama_cpp.llama_get_memory(self.ptr)
        self.checkpoints = (None if model.memory_kind == ATTENTION
                            else CheckpointStore(settings.checkpoint_budget_bytes))
        self.memory = SequenceMemory(self.ptr, model.memory_kind, self.checkpoints)
        # A saved state restores only into a context with as many streams: one unified, one a sequence split.
        self.prefix_store: PrefixStore | None = (None if stored is None else stored.open(
            model.memory_kind, settings.kv_type, layout.flash_attn, 1 if layout.kv_unified else layout.n_seq_max))
        # Unified KV: every sequence may use the whole context, and all of them share it. Split KV:
        # each sequence has its own share, and attends over only its own cells.
        self.kv_capacity = llama_cpp.llama_n_ctx(self.ptr)
        self.max_context = llama_cpp.llama_n_ctx_seq(self.ptr)
        # llama.cpp clamps n_batch to n_ctx.
        self.max_step_tokens = llama_cpp.llama_n_batch(self.ptr)
        # Split KV on a CPU: what a llama_decode call costs here, fitted as the engine runs. A GPU's
        # attention is not what a step's cost follows there, so an offloaded run keeps every step one call.
        self.call_cost = (CallCost(max_saving_cells=(layout.max_lanes - 1) * self.max_context)
                          if on_cpu(settings.n_gpu_layers) else None)
        self.tokens = TokenBatch(self.max_step_tokens)

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_free(self.ptr)
            self.ptr = None


def new_context(model: LlamaModel, settings: ContextSettings, layout: Layout,
                n_threads: int) -> llama_cpp.llama_context_p:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = settings.n_ctx
    params.n_batch = params.n_ubatch = settings.n_batch
    params.n_seq_max = layout.n_seq_max
    params.kv_unified = layout.kv_unified
    params.n_threads = params.n_threads_batch = n_threads
    params.type_k = params.type_v = KV_TYPES[settings.kv_type]
    params.flash_attn_type = FLASH_ATTN[layout.flash_attn]
    params.no_perf = True
    if settings.backend_sampling:
        # A row per request a step: one output per sequence, which the backend penalties sampler needs.
        params.n_outputs_max_per_seq = 1
    ctx = llama_cpp.llama_init_from_model(model.ptr, params)
    if not ctx:
        reason = "; ".join(take_recent_problems()) or "llama.cpp could not create the context"
        raise ModelLoadError(f"cannot load model {model.path} with n_ctx={settings.n_ctx}, "
                             f"kv_type={settings.kv_type}: {reason}")
    return ctx


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


# ----- the memory operations on a context's sequences, by model kind -----


class MemoryRefused(RuntimeError):
    """The memory cannot put a sequence in the asked state; nothing wrong was left behind."""


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
