"""One llama.cpp context on the loaded model, in one KV layout, and everything sized by it.

Sequence ids, unified KV: live requests use ids 0..max_lanes-1; finished sequences kept for prefix
reuse use ids max_lanes..max_lanes+cache_slots-1. Split KV: each id is its own stream of
n_ctx / n_seq_max cells, cached sequences included, and a cached sequence keeps the stream its lane had.

A relayout (runtime.llama.engine) closes the context and opens another: the layout, and the attention
kernel, are fixed per context in llama.cpp.

The context's llama_batch (StepBatch, below): arrays numpy owns, filled a whole step at a time with array operations; each token's seq_id pointer aims once and for good at its own cell of one int32 array.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.llama.cpu_tuning.decode_calls import CallCost
from swarm_panel.runtime.llama.log import take_recent_problems
from swarm_panel.runtime.llama.memory import ATTENTION, SequenceMemory
from swarm_panel.runtime.llama.model import LlamaModel, ModelLoadError, on_cpu
from swarm_panel.runtime.reuse.stored import PrefixKeeper, PrefixStore

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1, False: 0, True: 1}


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
