"""The real engine: one llama.cpp context, every step one `llama_decode` of a mixed batch (with split
KV, a few where one stream is far fuller than the rest: runtime.llama.cpu_tuning.decode_calls).

Sequence ids, unified KV: live requests use ids 0..max_lanes-1; finished sequences kept for prefix
reuse use ids max_lanes..max_lanes+cache_slots-1. Moving KV between ids (llama_memory_seq_cp then
seq_rm) only relabels cells, so caching, adopting and copying a prefix cost a scan of the cell
metadata, never a recomputation.

Split KV: each id is its own stream, and llama.cpp copies between streams only whole streams. A
finished sequence stays cached in its own stream, and a request that adopts it takes over that
stream (trimmed to the shared prefix), as llama-server's slots keep their last prompt. A copy (a
shared system prompt into another agent's stream) takes the source's state through host RAM
(`SequenceMemory.copy_across`). Live and cached sequences share the max_lanes ids, so the scheduler
evicts a cached one before a new lane needs its id (`max_sequences`, `consecutive_ids`).

A split layout that was a default, not a choice, turns unified (`widen`) for the first request longer
than a stream: a new context on the loaded model, every sequence dropped for the scheduler to recompute.
Once no request has needed more for a while, it turns split again (`narrow`) the same way.

Hybrid and recurrent models (Qwen3.5) hold one recurrent state per sequence beside the KV, which
cannot be cut back or copied in part: runtime.llama.memory does every memory operation by model
kind, and the engine keeps recurrent-state checkpoints (`checkpoints`) after rows marked for one,
so a prefix shorter than its sequence is reused only where a checkpoint restores the state exactly.

Stored prefixes (`prefix_store`, runtime.llama.prefix_keeper): after a row marked `store_prefix` (a long
shared head), the sequence's whole state is kept in RAM and on disk; a RESTORE op puts it back into a
request's sequence, in this run or a later one.
"""

from __future__ import annotations

import ctypes
import heapq
import logging
import os
import time
from dataclasses import dataclass
from itertools import accumulate, chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from swarm_panel.runtime.core.black_box import black_box
from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.core.engine import (
    EngineCaps,
    EngineError,
    EngineLoadError,
    KVCacheFull,
    PrefixOp,
    PrefixOpKind,
    Row,
    RowKind,
    Sample,
    StepPlan,
    StepResult,
)
from swarm_panel.runtime.core.kv_parking import ParkedSequence, ParkedSequences
from swarm_panel.runtime.core.progress import Progress, no_progress
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.batch import TokenBatch
from swarm_panel.runtime.llama.cpu_tuning.attention_follower import AttentionCurve, AttentionFollower
from swarm_panel.runtime.llama.cpu_tuning.cpu_contention import thread_governor
from swarm_panel.runtime.llama.cpu_tuning.decode_calls import CallCost, RowSpan, plan_calls, ubatch_features
from swarm_panel.runtime.llama.device_fit import device_shortfall
from swarm_panel.runtime.llama.devices import idle_gpu_backends, offload_devices
from swarm_panel.runtime.llama.greedy_sampler import GreedySampler, choose_rows
from swarm_panel.runtime.llama.log import ensure_backend, take_recent_problems
from swarm_panel.runtime.llama.memory import ATTENTION, MemoryRefused, SequenceMemory, memory_kind
from swarm_panel.runtime.llama.model_info import CHAT_TEMPLATE, chat_template, model_facts
from swarm_panel.runtime.llama.prefix_files import PrefixStoreOptions
from swarm_panel.runtime.llama.prefix_keeper import PrefixKeeper
from swarm_panel.runtime.llama.sampling import (
    BackendGreedySampler,
    ChainSampler,
    build_backend_sampler,
    build_sampler,
    runs_on_backend,
    token_logprob,
)
from swarm_panel.runtime.llama.vocab import LlamaVocab
from swarm_panel.runtime.planning.memory_plan import PlanSettings

log = logging.getLogger(__name__)

# Host memory for recurrent-state checkpoints: about 20 of Qwen3.5-9B's ~50 MB states, thousands of a
# tiny model's. Outside the KV, which llama.cpp sizes from n_ctx alone.
DEFAULT_CHECKPOINT_BUDGET = 1 << 30
# Host memory for finished sequences parked out of a unified KV pool (runtime.core.kv_parking).
DEFAULT_PARK_BUDGET = 2 << 30

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1, False: 0, True: 1}


_TOKENS = attrgetter("tokens")


class ModelLoadError(EngineLoadError):
    """The model file is missing, unreadable or not a model llama.cpp can run with these settings."""


@dataclass(slots=True, eq=False)
class _Lane:
    """A live request's llama.cpp sequence and its sampler (made on first sight)."""

    seq_id: int
    sampler: GreedySampler | ChainSampler | BackendGreedySampler | None = None
    # Leading tokens whose KV cells it shares with another sequence (a unified-KV prefix copy).
    shared: int = 0
    # The sampler's chain is attached to the context (llama_set_sampler): it runs inside the graph.
    on_backend: bool = False


def on_cpu(n_gpu_layers: int) -> bool:
    return n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload()


def resolve_flash_attn(flash_attn: str | bool, n_gpu_layers: int, kv_type: str) -> str | bool:
    """'auto' on a CPU-only run with an F16 cache means off here: which kernel wins depends on the CPU,
    and app.service.engine_factory asks runtime.llama.cpu_tuning.flash_attn_probe, which times both on this machine, before it builds
    an engine; an engine built directly keeps the plain path, the faster one on most CPUs measured.
    Elsewhere llama.cpp's own choice (GPUs, and a quantized V cache, which needs it)."""
    if flash_attn == "auto" and kv_type == "f16" and on_cpu(n_gpu_layers):
        return "off"
    return flash_attn


def default_threads(n_gpu_layers: int, leave_a_core: bool = False) -> int:
    """On the CPU, every core, or every core but one beside a desktop panel: llama.cpp's thread barriers
    stall whenever another thread (the panel's painting) takes one of its cores. With GPU offload,
    llama.cpp's own default."""
    if not on_cpu(n_gpu_layers):
        return llama_cpp.llama_context_default_params().n_threads
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores - 1) if leave_a_core else cores


class LlamaEngine:
    # Honours SamplingParams.grammar and .logprobs (the app refuses both on engines without this).
    samples_logits = True

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        max_lanes: int = 8,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_gpu_layers: int = 0,
        flash_attn: str | bool = "auto",
        kv_type: str = "f16",
        n_threads: int | None = None,
        leave_a_core: bool = False,
        cache_slots: int | None = None,
        kv_unified: bool = True,
        extra_buffers: bool = False,
        extra_buffers_reason: str = "off unless asked for",
        flash_attn_reason: str = "as asked for",
        attention_curve: AttentionCurve | None = None,
        note: str | None = None,
        checkpoint_budget_bytes: int = DEFAULT_CHECKPOINT_BUDGET,
        park_cached: bool = True,
        park_budget_bytes: int = DEFAULT_PARK_BUDGET,
        widens: bool = False,
        prefix_store: PrefixStoreOptions | None = None,
        backend_sampling: bool = False,
        backend_sampling_reason: str = "as asked for",
        progress: Progress = no_progress,
    ) -> None:
        self._model = self._ctx = None
        # The step being run's times (runtime.core.step_account), filled in as it runs.
        self._times = StepResult({}, 0.0)
        # The step's host work to run while the device computes (StepPlan.while_computing), until it has run.
        self._while_computing = None
        # Long shared heads' states kept across runs; None: not kept.
        self._prefix_keeper: PrefixKeeper | None = None
        self._batch: llama_cpp.llama_batch | None = None
        self._lanes: dict[int, _Lane] = {}
        # request_id of a finished request -> the cache sequence id holding its prefix.
        self._cached: dict[int, int] = {}
        # Finished sequences kept for reuse wait in host RAM (runtime.core.kv_parking): under unified KV
        # as they finish, under split KV once the scheduler evicts them from their streams.
        self._park_cached = park_cached
        self._parked = ParkedSequences(park_budget_bytes)
        # cache seq id -> leading tokens whose cells it shares with another sequence.
        self._cache_shared: dict[int, int] = {}
        self.path = Path(model_path)
        max_seqs = llama_cpp.llama_max_parallel_sequences()
        if not 1 <= max_lanes <= max_seqs:
            raise ValueError(f"max_lanes must be within 1..{max_seqs}, got {max_lanes}")
        self.max_lanes = max_lanes
        n_seq_max = self._set_layout(kv_unified, cache_slots)
        if kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {sorted(KV_TYPES)}, got {kv_type!r}")
        if flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be 'auto', 'on' or 'off', got {flash_attn!r}")
        if n_batch < 1 or n_ctx < 1:
            raise ValueError(f"n_batch and n_ctx must be positive, got {n_batch} and {n_ctx}")
        self._n_ctx, self._n_batch = n_ctx, n_batch
        self._checkpoint_budget = checkpoint_budget_bytes
        # Split KV chosen by default, not asked for: one request longer than a lane's share turns the
        # context unified (`widen`) instead of being refused.
        self.widens = widens and not kv_unified
        # A widened layout's lane share, to turn back to (`narrow`); 0 until it widens.
        self.narrows_to = 0
        self._split_slots = cache_slots
        self.n_threads = n_threads or default_threads(n_gpu_layers, leave_a_core)
        # With no count asked for, a CPU run's threads follow the cores other processes leave free.
        self._governor = thread_governor(self.n_threads) if n_threads is None and on_cpu(n_gpu_layers) else None
        self.kv_type, self.n_gpu_layers = kv_type, n_gpu_layers
        self.flash_attn = resolve_flash_attn(flash_attn, n_gpu_layers, kv_type)
        self.flash_attn_reason = flash_attn_reason
        # llama.cpp's extra buffer types (AMX, repacked CPU weights) crash or compute wrong batched
        # logits on some CPUs; off unless the caller has probed this machine (runtime.llama.cpu_tuning.extra_buffers_probe).
        self.extra_buffers = extra_buffers
        self.extra_buffers_reason = extra_buffers_reason
        self.note = note
        # Both kernels' decode steps by context, where the probe timed them: the engine thread then
        # switches kernels as the contexts served move (runtime.llama.cpu_tuning.attention_follower).
        self.attention_curve = attention_curve
        # The split layout's kernel and why, kept while widened, for `narrow` to bring back.
        self._split_attention: tuple[str, str] | None = None
        self.copies_prefixes = True
        # With GPU offload llama_decode returns once the graph is queued, and the caller's host work
        # (StepPlan.while_computing) overlaps the device's compute; on a CPU the call computes.
        self.computes_async = not on_cpu(n_gpu_layers)
        # llama.cpp's backend sampling: a request's chain runs inside the compute graph, so only its
        # token comes back, not the vocabulary's logits (runtime.llama.sampling.runs_on_backend says which).
        self.backend_sampling = backend_sampling
        self.backend_sampling_reason = backend_sampling_reason
        idle = idle_gpu_backends() if n_gpu_layers != 0 and on_cpu(n_gpu_layers) else []
        if idle:
            log.warning("this llama.cpp is built for %s but found no %s device: every layer runs on the CPU",
                        " and ".join(idle), " or ".join(idle))
        if n_gpu_layers < 0 and not on_cpu(n_gpu_layers):
            shortfall = device_shortfall(self.path, PlanSettings(
                lanes=max_lanes, context=max(n_ctx // max_lanes, 1), kv_type=kv_type, n_batch=n_batch,
                flash_attn=self.flash_attn != "off", kv_unified=kv_unified))
            if shortfall:
                raise ModelLoadError(f"cannot load model {self.path}: {shortfall}")
        self._model = self._load_model(n_gpu_layers, progress)
        try:
            self.memory_kind = memory_kind(self._model)
            if prefix_store is not None:
                self._prefix_keeper = PrefixKeeper(prefix_store, self.path)
            self._open_context(n_seq_max)
            self.layout_note = "unified KV" if kv_unified else f"split KV ({self.max_context} tokens a lane)"
            self.vocab = LlamaVocab(self._model)
            # Where a chat message ends (`<|im_end|>`): the first one closes the shared system prompt.
            self.turn_end_tokens = self.vocab.eog_tokens
            self._chat_template = chat_template(self._model)
            self._formatters: dict[bool, Jinja2ChatFormatter] = {}
            self._facts = self._read_facts()
            self.name: str = self._facts["name"]
            if self._governor is not None:
                self._governor.start(time.monotonic())
        except BaseException:
            self.close()
            raise

    def _set_layout(self, kv_unified: bool, cache_slots: int | None) -> int:
        """The sequence ids a layout has; returns llama.cpp's n_seq_max for it."""
        max_lanes, max_seqs = self.max_lanes, llama_cpp.llama_max_parallel_sequences()
        if not kv_unified:
            # Each sequence gets its own stream of n_ctx / n_seq_max cells, cached ones included; a
            # cached sequence keeps the stream its lane had, so no ids are set aside for the cache.
            cache_slots = max_lanes if cache_slots is None else cache_slots
            if not 0 <= cache_slots <= max_lanes:
                raise ValueError(f"with split KV, cache_slots must be within 0..{max_lanes}, got {cache_slots}")
            n_seq_max = max_lanes
        else:
            # As many cached sequences as lanes, within llama.cpp's limit on sequence ids.
            cache_slots = min(max_lanes, max_seqs - max_lanes) if cache_slots is None else cache_slots
            if not 0 <= cache_slots <= max_seqs - max_lanes:
                raise ValueError(f"cache_slots must be within 0..{max_seqs - max_lanes} beside {max_lanes} lanes, "
                                 f"got {cache_slots}")
            n_seq_max = max_lanes + cache_slots
        self.kv_unified = kv_unified
        self.parks_cached = kv_unified and self._park_cached
        self.parks_evicted = not kv_unified and self._park_cached
        self.max_cached_sequences = cache_slots
        # Live plus cached sequences the engine holds at once.
        self.max_sequences = n_seq_max
        return n_seq_max

    def _open_context(self, n_seq_max: int) -> None:
        """A context for the layout set, and everything sized by it."""
        self._ctx = self._new_context(n_seq_max, self._n_ctx, self._n_batch)
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.checkpoints = None if self.memory_kind == ATTENTION else CheckpointStore(self._checkpoint_budget)
        self._memory = SequenceMemory(self._ctx, self.memory_kind, self.checkpoints)
        # A saved state restores only into a context with as many streams: one unified, one a sequence split.
        self.prefix_store = (None if self._prefix_keeper is None else
                             self._prefix_keeper.open(self.memory_kind, self.kv_type, self.flash_attn,
                                                      1 if self.kv_unified else n_seq_max))
        # llama.cpp allocates a recurrent state per sequence id up front, outside n_ctx's KV cells:
        # it takes nothing from the KV budget.
        self.sequence_state_tokens = 0
        # Unified KV: every sequence may use the whole context, and all of them share it. Split KV:
        # each sequence has its own share, and attends over only its own cells.
        self.kv_capacity = llama_cpp.llama_n_ctx(self._ctx)
        self.max_context = llama_cpp.llama_n_ctx_seq(self._ctx)
        # llama.cpp clamps n_batch to n_ctx.
        self.max_step_tokens = llama_cpp.llama_n_batch(self._ctx)
        self._free_seq_ids = list(range(self.max_lanes))
        first_cache_id = self.max_lanes
        self._free_cache_ids = (list(range(first_cache_id, first_cache_id + self.max_cached_sequences))
                                if self.kv_unified else [])
        # Split KV on a CPU: what a llama_decode call costs here, fitted as the engine runs, and how
        # many steps it has run as more than one call. A GPU's attention is not what a step's cost
        # follows there, so an offloaded run keeps every step one call (None).
        self.call_cost = (CallCost(max_saving_cells=(self.max_lanes - 1) * self.max_context)
                          if on_cpu(self.n_gpu_layers) else None)
        self.split_steps = 0
        self._token_batch = TokenBatch(self.max_step_tokens)
        self._batch = self._token_batch.batch

    def widen(self, why: str) -> None:
        """Split KV becomes one unified pool, for a request longer than a lane's share: a new context
        on the loaded model (the weights stay where they are), with every sequence dropped, so the
        caller recomputes whoever was live. Where llama.cpp cannot make it (memory, on a card), the
        split context comes back and EngineError says why."""
        if not self.widens:
            raise EngineError("this engine's KV layout was chosen, not defaulted: it does not widen")
        # Once tried, never again: a card short of memory once is short of it each time.
        self.widens = False
        lane = self.max_context
        split_attention = (self.flash_attn, self.flash_attn_reason)
        self._relayout(True, None, f"unified KV (widened from split for {why})",
                       "the KV could not be made unified for a longer request", flash_attn=self._widened_kernel())
        self.narrows_to = lane
        if self.flash_attn != split_attention[0]:
            self._split_attention = split_attention
            self.flash_attn_reason = (f"{self.flash_attn}: the KV widened to one pool, where the plain path's attention "
                                      f"reads every sequence's cells for each row and flash attention its own")
            self._facts = self._read_facts()

    def _widened_kernel(self) -> str | None:
        """Flash attention for a widened pool, where the kernel was the CPU probe's to choose (a curve
        was timed): in one pool the plain path's attention multiplies every row by every sequence's
        cells and masks the others out, where flash attention skips them. On an Ice Lake Xeon, the demo
        model, a 5,000-token sequence beside 7 lanes of 300 tokens: 95 against 128 ms a step, the 7
        alone 51 against 128; beside 7 of 1,200 (where split lanes are a third cheaper without it):
        174 against 245, and 124 against 237 (benchmarks/attention_by_context.py --widened)."""
        return "on" if self.attention_curve is not None else None

    def narrow(self, why: str) -> None:
        """A widened layout turns split again, once no request needs more than a lane's share: every
        live token's attention then walks only its own lane's cells. Like `widen`, every sequence is
        dropped for the caller to recompute; it may widen again later."""
        if not self.narrows_to:
            raise EngineError("this engine's KV was not widened from split: it has no split layout to go back to")
        # Where the split context cannot come back, the unified one stays for good.
        lane, self.narrows_to = self.narrows_to, 0
        split_attention, self._split_attention = self._split_attention, None
        self._relayout(False, self._split_slots, f"split KV ({lane} tokens a lane; back from unified {why})",
                       "the KV could not be made split again", flash_attn=split_attention and split_attention[0])
        if split_attention is not None:
            self.flash_attn_reason = split_attention[1]
            self._facts = self._read_facts()
        self.widens = True

    def attention_follower(self) -> AttentionFollower | None:
        """Where the probe timed both attention kernels by context, what says when to switch kernels
        for the contexts served (the engine thread asks it between steps); None: the kernel stays."""
        if self.attention_curve is None:
            return None
        return AttentionFollower(self.attention_curve, self.flash_attn)

    def switch_attention(self, setting: str, why: str) -> None:
        """The other attention kernel, for the contexts being served (runtime.llama.cpu_tuning.attention_follower): a new
        context on the loaded model in the same layout, every sequence dropped for the caller to
        recompute, as `widen` does. llama.cpp fixes the kernel, and the V cache's layout, per context."""
        if setting not in ("on", "off") or setting == self.flash_attn:
            raise EngineError(f"cannot switch flash attention from {self.flash_attn!r} to {setting!r}")
        self._relayout(self.kv_unified, self.max_cached_sequences, self.layout_note,
                       "the attention kernel could not be switched", flash_attn=setting)
        self.flash_attn_reason = f"{setting}: switched {why}"
        self._facts = self._read_facts()

    def _relayout(self, kv_unified: bool, cache_slots: int | None, note: str, failure: str,
                  flash_attn: str | None = None) -> None:
        """A new context in another layout (or with another attention kernel) on the loaded model,
        every sequence dropped; where llama.cpp cannot make it, the old one comes back and EngineError
        says why."""
        self._require_open()
        started = time.perf_counter()
        before = (self.kv_unified, self.max_cached_sequences, self.flash_attn)
        self._drop_sequences()
        llama_cpp.llama_free(self._ctx)
        self._ctx = None
        self.flash_attn = flash_attn or self.flash_attn
        try:
            self._open_context(self._set_layout(kv_unified, cache_slots))
        except ModelLoadError as exc:
            log.error("%s (%s); keeping the context it had", failure, exc)
            self.flash_attn = before[2]
            self._open_context(self._set_layout(*before[:2]))
            raise EngineError(f"{failure}: {exc}") from None
        self.layout_note = note
        log.info("KV layout: %s, flash attention %s; context %d tokens for one request (new context in %.2f s)",
                 self.layout_note, self.flash_attn, self.max_context, time.perf_counter() - started)
        self._facts = self._read_facts()

    def _close_sampler(self, lane: _Lane) -> None:
        if lane.on_backend:
            # Detached before it is freed: the context keeps the pointer.
            llama_cpp.llama_set_sampler(self._ctx, lane.seq_id, None)
            lane.on_backend = False
        if lane.sampler is not None:
            lane.sampler.close()
            lane.sampler = None

    def _drop_sequences(self) -> None:
        for lane in self._lanes.values():
            self._close_sampler(lane)
        self._lanes.clear()
        self._cached.clear()
        self._parked.clear()
        self._cache_shared.clear()

    # ----- loading -----

    def _load_model(self, n_gpu_layers: int, progress: Progress) -> llama_cpp.llama_model_p:
        if not self.path.is_file():
            raise ModelLoadError(f"cannot load model {self.path}: no such file")
        ensure_backend()
        take_recent_problems()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = self.extra_buffers
        stage = f"loading the weights of {self.path.name}"
        progress(stage, 0.0)
        # Kept referenced until the load returns: llama.cpp calls it from inside the load.
        report = llama_cpp.llama_progress_callback(lambda done, _: progress(stage, float(done)) or True)
        params.progress_callback = report
        model = llama_cpp.llama_model_load_from_file(os.fsencode(self.path), params)
        if not model:
            reason = "; ".join(take_recent_problems()) or "llama.cpp rejected the file"
            raise ModelLoadError(f"cannot load model {self.path}: {reason}")
        return model

    def _new_context(self, n_seq_max: int, n_ctx: int, n_batch: int) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.kv_unified = self.kv_unified
        params.n_threads = params.n_threads_batch = self.n_threads
        params.type_k = params.type_v = KV_TYPES[self.kv_type]
        params.flash_attn_type = FLASH_ATTN[self.flash_attn]
        params.no_perf = True
        if self.backend_sampling:
            # A row per request a step: one output per sequence, which the backend penalties sampler needs.
            params.n_outputs_max_per_seq = 1
        ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not ctx:
            reason = "; ".join(take_recent_problems()) or "llama.cpp could not create the context"
            raise ModelLoadError(f"cannot load model {self.path} with n_ctx={n_ctx}, kv_type={self.kv_type}: {reason}")
        return ctx

    def _read_facts(self) -> dict[str, Any]:
        facts = model_facts(self._model, self.path)
        facts.update(
            # What one request may hold (a lane's share under split KV), and the cells of all lanes (--n-ctx).
            n_ctx=self.max_context,
            kv_capacity_tokens=self.kv_capacity,
            n_batch=self.max_step_tokens,
            max_lanes=self.max_lanes,
            cache_slots=self.max_cached_sequences,
            kv_type=self.kv_type,
            kv_unified=self.kv_unified,
            kv_layout=self.layout_note,
            flash_attn=self.flash_attn,
            flash_attn_reason=self.flash_attn_reason,
            n_gpu_layers=self.n_gpu_layers,
            n_threads=self.n_threads,
            extra_buffers=self.extra_buffers,
            extra_buffers_reason=self.extra_buffers_reason,
            backend_sampling=self.backend_sampling,
            backend_sampling_reason=self.backend_sampling_reason,
            note=self.note,
            device=self._device_name(),
        )
        return facts

    def _device_name(self) -> str:
        if on_cpu(self.n_gpu_layers):
            idle = idle_gpu_backends()
            return f"CPU (this {', '.join(idle)} build found no device)" if idle else "CPU"
        devices = offload_devices()
        return devices[0].line() if devices else "GPU"

    # ----- Engine protocol -----

    @property
    def caps(self) -> EngineCaps:
        return EngineCaps(self.kv_capacity, self.max_context, self.max_step_tokens, self.max_lanes,
                          self.max_cached_sequences, self.max_sequences, self.copies_prefixes, self.checkpoints,
                          self.sequence_state_tokens, self.turn_end_tokens,
                          parked=self._parked if self.parks_cached or self.parks_evicted else None,
                          parks_evicted=self.parks_evicted,
                          prefix_store=self.prefix_store,
                          consecutive_ids=not self.kv_unified,
                          widens_to=self.kv_capacity if self.widens else 0, narrows_to=self.narrows_to,
                          attention_bound_prefill=on_cpu(self.n_gpu_layers))

    def describe(self) -> dict[str, Any]:
        memory = {"memory_kind": self.memory_kind, "checkpoints": 0, "checkpoint_bytes": 0,
                  "checkpoint_budget_bytes": 0, "recurrent_state_bytes": self._memory.state_bytes,
                  "parked_sequences": len(self._parked), "parked_bytes": self._parked.num_bytes,
                  "park_budget_bytes": self._parked.budget_bytes if self.parks_cached or self.parks_evicted else 0}
        fit = self.call_cost.coefficients if self.call_cost is not None else None
        governor = self._governor
        memory.update(n_threads=self.n_threads, threads_follow_contention=governor is not None,
                      threads_most=self.n_threads if governor is None else governor.most,
                      other_processes_cpu_cores=None if governor is None else round(governor.others_cores, 2))
        memory.update(split_steps=self.split_steps,
                      decode_call_fit=None if fit is None else {"ubatch_ms": round(fit.ubatch_ms, 3),
                                                                "row_ms": round(fit.row_ms, 3),
                                                                "cell_us": round(1e3 * fit.cell_ms, 4)})
        store = self.prefix_store
        memory.update(stored_prefixes=0 if store is None else len(store),
                      stored_prefix_bytes=0 if store is None else store.num_bytes,
                      prefix_store_budget_bytes=0 if store is None else store.budget_bytes)
        if self.checkpoints is not None:
            memory.update(checkpoints=len(self.checkpoints), checkpoint_bytes=self.checkpoints.num_bytes,
                          checkpoint_budget_bytes=self.checkpoints.budget_bytes)
        return dict(self._facts, **memory)

    def step(self, plan: StepPlan) -> StepResult:
        started = time.perf_counter()
        self._require_open()
        if self._governor is not None:
            self._follow_contention()
        for request in plan.release:
            self._release(request)
        errors: dict[int, str] = {}
        refused: dict[int, str] = {}
        for op in plan.prefix_ops:
            self._apply_prefix_op(op, errors, refused)
        if plan.num_tokens > self.max_step_tokens:
            raise EngineError(f"step carries {plan.num_tokens} tokens, more than n_batch={self.max_step_tokens}")
        rows = plan.rows
        if errors or refused:
            rows = [row for row in rows
                    if row.request.request_id not in errors and row.request.request_id not in refused]
        self._times = times = StepResult({}, 0.0)
        self._while_computing = plan.while_computing
        admitted = self._admit(rows, errors)
        samples: dict[int, Sample] = {}
        done: list[tuple[int, Row]] = []
        try:
            for call in self._calls(admitted):
                self._run_call(call, samples)
                done += call
        except KVCacheFull:
            self._take_back(done, samples)
            raise
        self._while_computing = None
        times.samples, times.errors, times.refused = samples, errors, refused
        times.duration_s = time.perf_counter() - started
        return times

    def _follow_contention(self) -> None:
        threads = self._governor.poll(time.monotonic())
        if threads is not None:
            llama_cpp.llama_set_n_threads(self._ctx, threads, threads)
            self.n_threads = threads

    def close(self) -> None:
        self._drop_sequences()
        if self._prefix_keeper is not None:
            self._prefix_keeper.close()
        # The batch's arrays are numpy's, freed with the TokenBatch.
        self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def lane_kv_positions(self) -> list[int]:
        """Highest KV position each lane sequence id holds (-1: empty, or held by a cached sequence)."""
        self._require_open()
        cached = set(self._cached.values())
        return [-1 if seq_id in cached else llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id)
                for seq_id in range(self.max_lanes)]

    def cached_kv_positions(self) -> list[int]:
        """Highest KV position of each cached sequence, resident ones first, then parked ones (-1: empty)."""
        self._require_open()
        if self.kv_unified:
            ids = range(self.max_lanes, self.max_lanes + self.max_cached_sequences)
        else:
            ids = sorted(self._cached.values())
        positions = [llama_cpp.llama_memory_seq_pos_max(self._mem, seq_id) for seq_id in ids]
        if self._parked:
            positions = [p for p in positions if p >= 0] + [n - 1 for n in self._parked.lengths()]
        return positions + [-1] * (self.max_cached_sequences - len(positions))

    @property
    def num_cached_sequences(self) -> int:
        return len(self._cached) + len(self._parked)

    def __enter__(self) -> LlamaEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- text -----

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        return self.vocab.detokenize(tokens)

    def piece(self, token: int) -> bytes:
        return self.vocab.piece(token)

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render messages with the GGUF's own template (ChatML when the file has none)."""
        formatter = self._formatters.get(add_generation_prompt)
        if formatter is None:
            formatter = self._formatters[add_generation_prompt] = Jinja2ChatFormatter(
                self._chat_template or CHAT_TEMPLATE,
                eos_token=self.vocab.token_text(self.vocab.eos),
                bos_token=self.vocab.token_text(self.vocab.bos),
                add_generation_prompt=add_generation_prompt,
            )
        return formatter(messages=messages, tools=tools).prompt

    # ----- step parts -----

    def _require_open(self) -> None:
        if self._ctx is None:
            raise EngineError("the engine is closed")

    def _release(self, request: Request) -> None:
        self._parked.pop(request.request_id)
        cache_id = self._cached.pop(request.request_id, None)
        if cache_id is not None:
            self._free_cached_id(cache_id)
        lane = self._lanes.pop(request.request_id, None)
        if lane is None:
            return
        self._memory.drop(lane.seq_id)
        self._close_sampler(lane)
        heapq.heappush(self._free_seq_ids, lane.seq_id)

    def _free_cached_id(self, seq_id: int) -> None:
        self._cache_shared.pop(seq_id, None)
        self._memory.drop(seq_id)
        heapq.heappush(self._free_cache_ids if self.kv_unified else self._free_seq_ids, seq_id)

    def _apply_prefix_op(self, op: PrefixOp, errors: dict[int, str], refused: dict[int, str]) -> None:
        """Moves KV between sequences. A malformed op fails its destination; one the memory cannot do
        is refused (the destination recomputes), never applied halfway; neither fails the step."""
        if op.kind is PrefixOpKind.CACHE:
            self._cache_sequence(op, refused)
            return
        if op.kind is PrefixOpKind.PARK:
            self._park_evicted(op, refused)
            return
        if op.kind is PrefixOpKind.RESTORE:
            self._restore_stored(op, errors, refused)
            return
        dest, n, source_id = op.dest, op.num_tokens, None
        try:
            if dest.request_id in self._lanes:
                raise ValueError("the destination of a prefix op already has a sequence")
            if op.source.request_id in self._parked:
                self._unpark(op)
                return
            if op.kind is PrefixOpKind.ADOPT:
                source_id = self._cached.pop(op.source.request_id, None)
            else:
                source_lane = self._lanes.get(op.source.request_id)
                source_id = source_lane.seq_id if source_lane else self._cached.get(op.source.request_id)
            if source_id is None and op.source.request_id in refused:
                # Parked, then pushed out of the park budget by a park earlier in this plan.
                raise MemoryRefused(f"the prefix source (request {op.source.request_id}) left host RAM")
            if source_id is None:
                raise ValueError(f"the prefix source (request {op.source.request_id}) holds no KV here")
            held = self._memory.held(source_id)
            if not 0 < n <= held:
                raise ValueError(f"a prefix of {n} tokens was asked of a sequence holding {held}")
            if not self.kv_unified and op.kind is PrefixOpKind.ADOPT:
                # dest takes over the cached stream, cut back to the shared prefix.
                self._memory.trim(source_id, n, dest.token_ids)
                self._lanes[dest.request_id] = _Lane(source_id)
                source_id = None
                return
            lane = self._lane_for(dest)
            try:
                if self.kv_unified:
                    self._memory.copy(source_id, lane.seq_id, n, dest.token_ids)
                else:
                    self._memory.copy_across(source_id, lane.seq_id, n, dest.token_ids)
            except MemoryRefused:
                del self._lanes[dest.request_id]
                heapq.heappush(self._free_seq_ids, lane.seq_id)
                raise
            if self.kv_unified:
                self._note_sharing(op, source_id, lane, n)
        except ValueError as exc:
            errors[dest.request_id] = str(exc)
        except MemoryRefused as exc:
            refused[dest.request_id] = str(exc)
        finally:
            if op.kind is PrefixOpKind.ADOPT:
                # A parked state is consumed either way too.
                self._parked.pop(op.source.request_id)
            if op.kind is PrefixOpKind.ADOPT and source_id is not None:
                # The cached sequence is consumed either way: its cells now belong to dest or nobody.
                self._free_cached_id(source_id)

    def _note_sharing(self, op: PrefixOp, source_id: int, lane: _Lane, n: int) -> None:
        """After a unified copy of n tokens (seq_cp shares cells, it copies none): what dest shares."""
        if op.kind is PrefixOpKind.ADOPT:
            # The cached sequence goes; dest keeps sharing only what it shared with others.
            lane.shared = min(n, self._cache_shared.get(source_id, 0))
            return
        lane.shared = n
        source_lane = self._lanes.get(op.source.request_id)
        if source_lane is not None:
            source_lane.shared = max(source_lane.shared, n)
        else:
            self._cache_shared[source_id] = max(self._cache_shared.get(source_id, 0), n)

    def _unpark(self, op: PrefixOp) -> None:
        """Gives dest the first num_tokens of a parked sequence: its state restored, then cut back."""
        parked, n = self._parked.get(op.source.request_id), op.num_tokens
        if not 0 < n <= parked.num_tokens:
            raise ValueError(f"a prefix of {n} tokens was asked of a sequence holding {parked.num_tokens}")
        self._load_state(op.dest, parked.data, parked.num_tokens, n)

    def _restore_stored(self, op: PrefixOp, errors: dict[int, str], refused: dict[int, str]) -> None:
        """Gives dest the first num_tokens of a stored prefix (read back from disk if not in RAM); the
        stored prefix stays. One that cannot be restored is refused: dest recomputes."""
        dest = op.dest
        try:
            if dest.request_id in self._lanes:
                raise ValueError("the destination of a prefix op already has a sequence")
            if self._prefix_keeper is None or self.prefix_store is None:
                raise MemoryRefused("this engine keeps no stored prefixes")
            entry = op.source
            self._load_state(dest, self._prefix_keeper.state(entry, dest.token_ids, op.num_tokens),
                             entry.num_tokens, op.num_tokens)
            self.prefix_store.num_restored += 1
        except ValueError as exc:
            errors[dest.request_id] = str(exc)
        except MemoryRefused as exc:
            log.warning("request %d does not start from a stored prefix: %s", dest.request_id, exc)
            refused[dest.request_id] = str(exc)

    def _load_state(self, dest: Request, data, held: int, n: int) -> None:
        """Restores a saved state of `held` tokens into dest's new sequence and cuts it back to n."""
        lane = self._lane_for(dest)
        try:
            self._memory.load(lane.seq_id, data, held)
            if n < held:
                try:
                    self._memory.trim(lane.seq_id, n, dest.token_ids)
                except MemoryRefused:
                    self._memory.drop(lane.seq_id)
                    raise
        except MemoryRefused:
            del self._lanes[dest.request_id]
            heapq.heappush(self._free_seq_ids, lane.seq_id)
            raise

    def _park(self, seq_id: int, rid: int, n: int, tokens: list[int]) -> None:
        self._memory.trim(seq_id, n, tokens)
        data = self._memory.save(seq_id)
        if not self._parked.fits(len(data)):
            raise MemoryRefused(f"parking {len(data)} bytes would pass the park budget of "
                                f"{self._parked.budget_bytes} bytes")
        self._parked.put(rid, ParkedSequence(data, n))

    def _park_evicted(self, op: PrefixOp, refused: dict[int, str]) -> None:
        """A cached sequence leaves its stream for host RAM, its id free for a live lane; the oldest
        parked states make way past the budget, and the scheduler hears of each that went (refused)."""
        rid = op.source.request_id
        seq_id = self._cached.pop(rid, None)
        if seq_id is None:
            # Released in this very plan.
            return
        try:
            data = self._memory.save(seq_id)
            if len(data) > self._parked.budget_bytes:
                raise MemoryRefused(f"{len(data)} bytes are more than the park budget of "
                                    f"{self._parked.budget_bytes} bytes")
            while not self._parked.fits(len(data)):
                oldest = self._parked.oldest()
                self._parked.pop(oldest)
                refused[oldest] = "parked sequences over the park budget: the oldest went"
            self._parked.put(rid, ParkedSequence(data, op.num_tokens))
        except MemoryRefused as exc:
            log.info("request %d's sequence is not parked: %s", rid, exc)
            refused[rid] = str(exc)
        finally:
            self._free_cached_id(seq_id)

    def _cache_sequence(self, op: PrefixOp, refused: dict[int, str]) -> None:
        """A finished request's sequence stays resident, cut to op.num_tokens, or is freed if it cannot be."""
        rid, n = op.source.request_id, op.num_tokens
        lane = self._lanes.pop(rid, None)
        if lane is None:
            return
        self._close_sampler(lane)
        try:
            if not self.kv_unified and n > 0:
                # The lane's own stream becomes the cached sequence: nothing moves.
                self._memory.trim(lane.seq_id, n, op.source.token_ids)
                self._cached[rid] = lane.seq_id
                return
            shared = min(lane.shared, n)
            # Parking frees only cells no other sequence holds, and a restore copies every cell back:
            # a sequence that mostly shares (agents on one long system prompt) stays resident.
            if self.parks_cached and n > 0 and n - shared >= shared:
                self._park(lane.seq_id, rid, n, op.source.token_ids)
            elif self._free_cache_ids and n > 0:
                cache_id = heapq.heappop(self._free_cache_ids)
                try:
                    self._memory.copy(lane.seq_id, cache_id, n, op.source.token_ids)
                except MemoryRefused:
                    heapq.heappush(self._free_cache_ids, cache_id)
                    raise
                self._cached[rid] = cache_id
                self._cache_shared[cache_id] = shared
        except MemoryRefused as exc:
            log.warning("request %d's sequence is not kept for reuse: %s", rid, exc)
            refused[rid] = str(exc)
        if self._cached.get(rid) != lane.seq_id:
            self._memory.drop(lane.seq_id)
            heapq.heappush(self._free_seq_ids, lane.seq_id)

    def _admit(self, rows: list[Row], errors: dict[int, str]) -> list[tuple[int, Row]]:
        """The rows that can run, with their sequence ids, in id order; a row that cannot gets an
        error for its request instead."""
        admitted: list[tuple[int, Row]] = []
        seen: set[int] = set()
        tokens_checked = self._tokens_in_vocabulary(rows)
        for row in rows:
            rid = row.request.request_id
            try:
                if rid in seen:
                    raise ValueError("the step holds two rows for this request")
                seen.add(rid)
                self._check_row(row, tokens_checked)
                lane = self._lane_for(row.request)
                self._check_position(row, lane)
                if row.sample and row.kind is not RowKind.PADDING:
                    self._prepare_sampling(row.request, lane)
            except ValueError as exc:
                errors[rid] = str(exc)
            else:
                admitted.append((lane.seq_id, row))
        # With split KV, llama.cpp cuts a step into ubatches of consecutive sequence ids; rows in
        # id order keep a step one ubatch wherever the ids in use have no gaps.
        admitted.sort(key=itemgetter(0))
        return admitted

    def _tokens_in_vocabulary(self, rows: list[Row]) -> bool:
        """Whether every token of the step is in the vocabulary, looked at without a Python loop, so
        that rows are checked one by one only when one is not (or a row is empty)."""
        tokens = list(map(_TOKENS, rows))
        return all(tokens) and (not tokens or (min(map(min, tokens)) >= 0
                                               and max(map(max, tokens)) < self.vocab.n_tokens))

    def _check_row(self, row: Row, tokens_checked: bool) -> None:
        n = len(row.tokens)
        if not n:
            raise ValueError("a row needs at least one token")
        if row.start < 0 or row.start + n > self.max_context:
            raise ValueError(f"positions {row.start}..{row.start + n - 1} exceed the context "
                             f"of {self.max_context} tokens")
        if not tokens_checked and (min(row.tokens) < 0 or max(row.tokens) >= self.vocab.n_tokens):
            raise ValueError(f"token ids must be within 0..{self.vocab.n_tokens - 1}")

    def _lane_for(self, request: Request) -> _Lane:
        lane = self._lanes.get(request.request_id)
        if lane is None:
            if not self._free_seq_ids:
                raise ValueError(f"no free lane: all {self.max_lanes} sequences are in use")
            lane = self._lanes[request.request_id] = _Lane(heapq.heappop(self._free_seq_ids))
        return lane

    def _check_position(self, row: Row, lane: _Lane) -> None:
        self._memory.check_row(lane.seq_id, row.start)

    def _prepare_sampling(self, request: Request, lane: _Lane) -> None:
        if lane.sampler is None:
            sampling = request.sampling
            eog_tokens = self.vocab.eog_tokens
            eog = eog_tokens if sampling.ignore_eos else ()
            output = [t for t in request.output_token_ids if t not in eog_tokens] if sampling.grammar else ()
            vocab = llama_cpp.llama_model_get_vocab(self._model)
            if self.backend_sampling and runs_on_backend(sampling):
                lane.sampler = build_backend_sampler(sampling, self.vocab.n_tokens, eog, request.token_ids)
                lane.on_backend = bool(llama_cpp.llama_set_sampler(self._ctx, lane.seq_id, lane.sampler.chain))
                if lane.on_backend:
                    return
                # llama.cpp refused it (its log says why): the host samples this request.
                self._close_sampler(lane)
            lane.sampler = build_sampler(sampling, self.vocab.n_tokens, eog, request.token_ids, vocab, output)

    def _calls(self, admitted: list[tuple[int, Row]]) -> list[list[tuple[int, Row]]]:
        """The step's llama_decode calls (runtime.llama.cpu_tuning.decode_calls): with split KV, rows whose stream is far
        fuller than their neighbours' may run apart; a unified pool spans the same cells for every row."""
        if self.kv_unified or self.call_cost is None or len(admitted) < 2:
            return [admitted]
        spans = [RowSpan(seq_id, row.start + 1, len(row.tokens) > 1) for seq_id, row in admitted]
        calls = plan_calls(spans, self.call_cost.for_step(), self.max_context)
        if len(calls) > 1:
            self.split_steps += 1
        return [[admitted[i] for i in call] for call in calls]

    def _run_call(self, call: list[tuple[int, Row]], samples: dict[int, Sample]) -> None:
        to_sample = self._fill_batch(call)
        if not self._batch.n_tokens:
            return
        started = time.perf_counter()
        self._decode(call)
        elapsed = time.perf_counter() - started
        if self.call_cost is not None and not self.kv_unified and self._batch.n_tokens == len(call):
            spans = [RowSpan(seq_id, row.start + 1) for seq_id, row in call]
            self.call_cost.observe(*ubatch_features(spans, self.max_context), elapsed)
        outputs = self._token_batch.num_outputs
        host_logits = outputs and not all(self._lanes[row.request.request_id].on_backend for _, row in call)
        if host_logits:
            # One row without a backend sampler, and llama.cpp copies every output row's logits.
            self._times.logits_bytes += outputs * self.vocab.n_tokens * 4
        # A later call overwrites this one's logits: its rows are sampled now.
        wall, cpu = time.perf_counter(), time.thread_time()
        self._sample_call(to_sample, outputs if host_logits else 0, samples)
        self._times.sample_s += time.perf_counter() - wall
        self._times.sample_cpu_s += time.thread_time() - cpu

    def _sample_call(self, to_sample: list[tuple[int, int, Row]], outputs: int, samples: dict[int, Sample]) -> None:
        """Each row's token: the numpy greedy rows together from one view of the `outputs` rows of logits the
        host holds (0: none; a view a row cost more than its argmax), the others by their own samplers."""
        greedy = []
        if outputs:
            greedy = [(index, ordinal, row) for index, ordinal, row in to_sample
                      if isinstance(self._lanes[row.request.request_id].sampler, GreedySampler)]
        if greedy:
            pointer = ctypes.cast(llama_cpp.llama_get_logits(self._ctx), ctypes.POINTER(ctypes.c_float))
            logits = np.ctypeslib.as_array(pointer, shape=(outputs, self.vocab.n_tokens))
            tokens = choose_rows([self._lanes[row.request.request_id].sampler for _, _, row in greedy], logits,
                                 [ordinal for _, ordinal, _ in greedy])
            for (index, _, row), token in zip(greedy, tokens):
                samples[row.request.request_id] = self._sampled(row.request, index, token)
        for index, _, row in to_sample:
            if row.request.request_id not in samples:
                token = self._lanes[row.request.request_id].sampler.sample(self._ctx, index)
                samples[row.request.request_id] = self._sampled(row.request, index, token)

    def _take_back(self, done: list[tuple[int, Row]], samples: dict[int, Sample]) -> None:
        """A later call of the step found no KV room: the step keeps nothing, so the rows already run
        give back their cells and their samples (a sampler chain rebuilds from the request's tokens)."""
        for seq_id, row in done:
            self._memory.discard_from(seq_id, row.start)
            request = row.request
            if samples.pop(request.request_id, None) is None:
                continue
            lane = self._lanes[request.request_id]
            self._close_sampler(lane)
            if request.sampling.logprobs is not None:
                request.output_logprobs.pop()

    def _fill_batch(self, admitted: list[tuple[int, Row]]) -> list[tuple[int, int, Row]]:
        """Lays the rows out in the batch; returns (batch index, output row, row) for each row to sample."""
        rows = [row for _, row in admitted]
        lengths = [len(row.tokens) for row in rows]
        ends = list(accumulate(lengths))
        # Padding lanes cost what a real lane costs; their sample is thrown away.
        outputs = [end - 1 for end, row in zip(ends, rows) if row.sample or row.kind is RowKind.PADDING]
        self._token_batch.fill(list(chain.from_iterable(map(_TOKENS, rows))), lengths,
                               [row.start for row in rows], [seq_id for seq_id, _ in admitted], ends, outputs)
        ordinals = {index: ordinal for ordinal, index in enumerate(outputs)}
        return [(end - 1, ordinals[end - 1], row) for end, row in zip(ends, rows)
                if row.sample and row.kind is not RowKind.PADDING]

    def _decode(self, admitted: list[tuple[int, Row]]) -> None:
        for seq_id, row in admitted:
            if row.checkpoint_start:
                self._memory.snapshot(seq_id, row.request.token_ids[:row.start])
        take_recent_problems()
        box = black_box()
        if box is not None:
            box.record(self._step_shape(admitted))
        wall, cpu = time.perf_counter(), time.thread_time()
        code = llama_cpp.llama_decode(self._ctx, self._batch)
        if code == 0:
            # On a card llama_decode returns once the graph is queued: the caller's host work runs while it
            # computes (on a CPU the compute is done by now), then the outputs are ready after the sync.
            if self._while_computing is not None:
                work, self._while_computing = self._while_computing, None
                work_wall, work_cpu = time.perf_counter(), time.thread_time()
                work()
                # The thread's own work, not the device's: overlapped where the device was still computing.
                work_wall, work_cpu = time.perf_counter() - work_wall, time.thread_time() - work_cpu
                wall, cpu = wall + work_wall, cpu + work_cpu
                if self.computes_async:
                    self._times.overlapped_s += work_wall
            llama_cpp.llama_synchronize(self._ctx)
        times = self._times
        times.device_s += time.perf_counter() - wall
        times.device_cpu_s += time.thread_time() - cpu
        if code == 0:
            for seq_id, row in admitted:
                end = row.start + len(row.tokens)
                self._memory.advanced(seq_id, end)
                if row.checkpoint:
                    self._memory.snapshot(seq_id, row.request.token_ids[:end])
                if row.store_prefix and self._prefix_keeper is not None:
                    self._prefix_keeper.keep(self._memory, seq_id, row.request.token_ids[:end])
            return
        # llama.cpp restores the cache after code 1 and -1; after others, ubatches already
        # computed stay behind. Either way, nothing of this step may remain.
        for seq_id, row in admitted:
            self._memory.discard_from(seq_id, row.start)
        if code == 1:
            raise KVCacheFull(f"no KV cache room for a step of {self._batch.n_tokens} tokens "
                              f"(capacity {self.kv_capacity})")
        problems = "; ".join(take_recent_problems())
        raise EngineError(f"llama_decode failed with code {code}" + (f": {problems}" if problems else ""))

    def _step_shape(self, admitted: list[tuple[int, Row]]) -> str:
        """The llama_decode call about to run, in words a crash report can carry."""
        lanes = [self._lanes.get(row.request.request_id) for _, row in admitted]
        graph = sorted(lane.seq_id for lane in lanes if lane is not None and lane.on_backend)
        rows = ", ".join(f"seq {seq_id} @{row.start}+{len(row.tokens)}" for seq_id, row in admitted)
        return (f"llama_decode: {self._batch.n_tokens} tokens, {len(admitted)} sequences, "
                f"{self._token_batch.num_outputs} outputs; samplers in the graph: "
                f"{', '.join(map(str, graph)) or 'none'} of {len(self._lanes)} lanes "
                f"(backend sampling {'on' if self.backend_sampling else 'off'}); rows: {rows}")

    def _sampled(self, request: Request, index: int, token: int) -> Sample:
        """The token and whether it ends generation; runtime.serving.output_processor makes its text."""
        end = token in self.vocab.eog_tokens
        if request.sampling.logprobs is not None:
            # On the request, not the Sample: the scheduler forwards only token and text.
            request.output_logprobs.append(token_logprob(self._ctx, index, self.vocab.n_tokens, token,
                                                         request.sampling.logprobs, self.vocab.piece, end))
        return Sample(token, end)
