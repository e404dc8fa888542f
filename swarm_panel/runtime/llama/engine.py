"""The real engine: one llama.cpp context, every step one `llama_decode` of a mixed batch.

It is four parts, each made anew when the layout changes (`relayout`) except the first:
- the model (runtime.llama.model): the weights, vocabulary, chat template and facts, loaded once;
- the context (runtime.llama.context): one llama.cpp context in one KV layout, and what it sizes;
- the sequences (runtime.llama.sequences): which sequence holds what, and the scheduler's prefix ops
  between them;
- the runner (runtime.llama.runner): a step's batch, llama_decode and sampling.

A split layout that was a default, not a choice, turns unified (`RelayoutKind.WIDEN`) for the first
request longer than a stream: a new context on the loaded model, every sequence dropped for the
scheduler to recompute. Once no request has needed more for a while, it turns split again (NARROW) the
same way; the CPU tuning's attention follower may switch the kernel likewise (ATTENTION).

Stored prefixes (runtime.reuse.saved_states): after a row marked `store_prefix` (a long shared head),
the sequence's whole state is kept in RAM and on disk; a RESTORE op puts it back into a request's
sequence, in this run or a later one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import llama_cpp

from swarm_panel.runtime.core.engine import EngineCaps, EngineError, RelayoutKind, StepPlan, StepResult
from swarm_panel.runtime.core.progress import Progress, no_progress
from swarm_panel.runtime.llama.context import ContextSettings, Layout, LlamaContext, resolve_flash_attn
from swarm_panel.runtime.llama.cpu_tuning.followers import AttentionCurve, AttentionFollower, thread_governor
from swarm_panel.runtime.llama.device_fit import device_shortfall
from swarm_panel.runtime.llama.devices import device_name, idle_gpu_backends
from swarm_panel.runtime.llama.facts import LlamaFacts, LlamaFigures
from swarm_panel.runtime.llama.figures import live_figures
from swarm_panel.runtime.llama.model import LlamaModel, ModelLoadError, default_threads, on_cpu
from swarm_panel.runtime.llama.runner import StepRunner
from swarm_panel.runtime.llama.sequences import PrefixOps, Sequences
from swarm_panel.runtime.planning.memory_plan import PlanSettings
from swarm_panel.runtime.reuse.saved_states import ParkedSequences, PrefixKeeper
from swarm_panel.runtime.reuse.stored_files import PrefixStoreOptions

log = logging.getLogger(__name__)

# Host memory for recurrent-state checkpoints: about 20 of Qwen3.5-9B's ~50 MB states, thousands of a
# tiny model's. Outside the KV, which llama.cpp sizes from n_ctx alone.
DEFAULT_CHECKPOINT_BUDGET = 1 << 30
# Host memory for finished sequences parked out of a unified KV pool (runtime.reuse.saved_states).
DEFAULT_PARK_BUDGET = 2 << 30


class LlamaEngine:
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
        self._model: LlamaModel | None = None
        self._context: LlamaContext | None = None
        self._sequences: Sequences | None = None
        # Long shared heads' states kept across runs; None: not kept.
        self._prefix_keeper: PrefixKeeper | None = None
        self.path = Path(model_path)
        max_seqs = llama_cpp.llama_max_parallel_sequences()
        if not 1 <= max_lanes <= max_seqs:
            raise ValueError(f"max_lanes must be within 1..{max_seqs}, got {max_lanes}")
        self.max_lanes = max_lanes
        self._settings = ContextSettings.checked(n_ctx, n_batch, kv_type, n_gpu_layers, backend_sampling,
                                                 checkpoint_budget_bytes, flash_attn)
        layout = Layout.checked(kv_unified, max_lanes, cache_slots, resolve_flash_attn(flash_attn, n_gpu_layers, kv_type))
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
        self.flash_attn_reason = flash_attn_reason
        # llama.cpp's extra buffer types (AMX, repacked CPU weights) crash or compute wrong batched
        # logits on some CPUs; off unless the caller has probed this machine (runtime.llama.cpu_tuning.extra_buffers_probe).
        self.extra_buffers, self.extra_buffers_reason = extra_buffers, extra_buffers_reason
        self.note = note
        # Both kernels' decode steps by context, where the probe timed them: the kernel then follows the
        # contexts served (runtime.llama.cpu_tuning.followers.AttentionFollower, asked by the engine thread).
        self.attention_curve = attention_curve
        self._attention = AttentionFollower(attention_curve, layout.flash_attn) if attention_curve else None
        # The split layout's kernel and why, kept while widened, for `narrow` to bring back.
        self._split_attention: tuple[str | bool, str] | None = None
        # With GPU offload llama_decode returns once the graph is queued, and the caller's host work
        # (StepPlan.while_computing) overlaps the device's compute; on a CPU the call computes.
        self.computes_async = not on_cpu(n_gpu_layers)
        # llama.cpp's backend sampling: a request's chain runs inside the compute graph, so only its
        # token comes back, not the vocabulary's logits (runtime.llama.sampling.runs_on_backend says which).
        self.backend_sampling, self.backend_sampling_reason = backend_sampling, backend_sampling_reason
        self._park_cached = park_cached
        self._parked = ParkedSequences(park_budget_bytes)
        idle = idle_gpu_backends() if n_gpu_layers != 0 and on_cpu(n_gpu_layers) else []
        if idle:
            log.warning("this llama.cpp is built for %s but found no %s device: every layer runs on the CPU",
                        " and ".join(idle), " or ".join(idle))
        if n_gpu_layers < 0 and not on_cpu(n_gpu_layers):
            shortfall = device_shortfall(self.path, PlanSettings(
                lanes=max_lanes, context=max(n_ctx // max_lanes, 1), kv_type=kv_type, n_batch=n_batch,
                flash_attn=layout.flash_attn != "off", kv_unified=kv_unified))
            if shortfall:
                raise ModelLoadError(f"cannot load model {self.path}: {shortfall}")
        self._model = LlamaModel(self.path, n_gpu_layers, extra_buffers, progress)
        try:
            self.memory_kind = self._model.memory_kind
            # The engine thread's vocabulary; other threads use `tokenizer`, a view of their own.
            self.vocab = self._model.vocab
            self.tokenizer = self._model.tokenizer()
            # Where a chat message ends (`<|im_end|>`): the first one closes the shared system prompt.
            self.turn_end_tokens = self.vocab.eog_tokens
            if prefix_store is not None:
                self._prefix_keeper = PrefixKeeper(prefix_store, self.path, llama_cpp.__version__)
            self._open(layout, "unified KV" if kv_unified else None)
            self.name: str = self.facts.name
            if self._governor is not None:
                self._governor.start(time.monotonic())
        except BaseException:
            self.close()
            raise

    def _open(self, layout: Layout, note: str | None) -> None:
        """A context in this layout, and the sequences and runner that live on it."""
        context = self._context = LlamaContext(self._model, self._settings, layout, self.n_threads,
                                               self._prefix_keeper)
        self._sequences = Sequences(context, self._parked, self._park_cached)
        self._prefix_ops = PrefixOps(self._sequences, self._prefix_keeper)
        self._runner = StepRunner(self._model, self._sequences, self._prefix_keeper,
                                  backend_sampling=self.backend_sampling, computes_async=self.computes_async)
        self.layout_note = note or f"split KV ({context.max_context} tokens a lane)"
        self.facts = self._read_facts()

    # ----- what the context holds -----

    kv_capacity = property(lambda self: self._context.kv_capacity)
    max_context = property(lambda self: self._context.max_context)
    max_step_tokens = property(lambda self: self._context.max_step_tokens)
    checkpoints = property(lambda self: self._context.checkpoints)
    prefix_store = property(lambda self: self._context.prefix_store)
    call_cost = property(lambda self: self._context.call_cost)
    kv_unified = property(lambda self: self._context.layout.kv_unified)
    flash_attn = property(lambda self: self._context.layout.flash_attn)
    max_cached_sequences = property(lambda self: self._context.layout.cache_slots)
    max_sequences = property(lambda self: self._context.layout.n_seq_max)
    parks_cached = property(lambda self: self._sequences.parks_cached)
    parks_evicted = property(lambda self: self._sequences.parks_evicted)
    split_steps = property(lambda self: self._runner.split_steps)
    num_cached_sequences = property(lambda self: len(self._sequences.cached) + len(self._parked))

    @property
    def caps(self) -> EngineCaps:
        context, seqs = self._context, self._sequences
        # llama.cpp allocates a recurrent state per sequence id up front, outside n_ctx's KV cells: it
        # takes nothing from the KV budget (sequence_state_tokens 0).
        return EngineCaps(context.kv_capacity, context.max_context, context.max_step_tokens, self.max_lanes,
                          context.layout.cache_slots, context.layout.n_seq_max, True, context.checkpoints, 0,
                          self.turn_end_tokens,
                          parked=self._parked if seqs.parks_cached or seqs.parks_evicted else None,
                          parks_evicted=seqs.parks_evicted, prefix_store=context.prefix_store,
                          consecutive_ids=not seqs.kv_unified,
                          widens_to=context.kv_capacity if self.widens else 0, narrows_to=self.narrows_to,
                          attention_bound_prefill=on_cpu(self.n_gpu_layers), computes_async=self.computes_async,
                          samples_logits=True, attention=self._attention)

    def _read_facts(self) -> LlamaFacts:
        context, layout = self._context, self._context.layout
        return LlamaFacts(
            **self._model.info, device=device_name(self.n_gpu_layers),
            # What one request may hold (a lane's share under split KV), and the cells of all lanes (--n-ctx).
            n_ctx=context.max_context, kv_capacity_tokens=context.kv_capacity, kv_type=self.kv_type,
            memory_kind=self.memory_kind, note=self.note, n_batch=context.max_step_tokens, max_lanes=self.max_lanes,
            cache_slots=layout.cache_slots, kv_unified=layout.kv_unified, kv_layout=self.layout_note,
            flash_attn=layout.flash_attn, flash_attn_reason=self.flash_attn_reason, n_gpu_layers=self.n_gpu_layers,
            extra_buffers=self.extra_buffers, extra_buffers_reason=self.extra_buffers_reason,
            backend_sampling=self.backend_sampling, backend_sampling_reason=self.backend_sampling_reason)

    def figures(self) -> LlamaFigures:
        return live_figures(self._context, self._sequences, self._runner, self.n_threads, self._governor)

    # ----- the step -----

    def step(self, plan: StepPlan) -> StepResult:
        started = time.perf_counter()
        self._require_open()
        if self._governor is not None:
            self._follow_contention()
        for request in plan.release:
            self._sequences.release(request)
        errors: dict[int, str] = {}
        refused: dict[int, str] = {}
        for op in plan.prefix_ops:
            self._prefix_ops.apply(op, errors, refused)
        if plan.num_tokens > self.max_step_tokens:
            raise EngineError(f"step carries {plan.num_tokens} tokens, more than n_batch={self.max_step_tokens}")
        rows = plan.rows
        if errors or refused:
            rows = [row for row in rows
                    if row.request.request_id not in errors and row.request.request_id not in refused]
        result = self._runner.run(rows, errors, plan.while_computing)
        result.refused = refused
        result.duration_s = time.perf_counter() - started
        return result

    def _follow_contention(self) -> None:
        threads = self._governor.poll(time.monotonic())
        if threads is not None:
            llama_cpp.llama_set_n_threads(self._context.ptr, threads, threads)
            self.n_threads = threads

    def piece(self, token: int) -> bytes:
        return self.vocab.piece(token)

    def lane_kv_positions(self) -> list[int]:
        self._require_open()
        return self._sequences.lane_kv_positions()

    def cached_kv_positions(self) -> list[int]:
        self._require_open()
        return self._sequences.cached_kv_positions()

    # ----- between steps -----

    def relayout(self, kind: RelayoutKind, why: str, flash_attn: str | None = None) -> None:
        """A new context on the loaded model (the weights stay where they are), every sequence dropped for
        the caller to recompute. Where llama.cpp cannot make it (memory, on a card), the old context comes
        back and EngineError says why."""
        if kind is RelayoutKind.WIDEN:
            self._widen(why)
        elif kind is RelayoutKind.NARROW:
            self._narrow(why)
        else:
            self._switch_attention(flash_attn, why)

    def _widen(self, why: str) -> None:
        """Split KV becomes one unified pool, for a request longer than a lane's share."""
        if not self.widens:
            raise EngineError("this engine's KV layout was chosen, not defaulted: it does not widen")
        # Once tried, never again: a card short of memory once is short of it each time.
        self.widens = False
        lane, split_attention = self.max_context, (self.flash_attn, self.flash_attn_reason)
        # Where the kernel was the CPU probe's to choose (a curve was timed), flash attention for the pool:
        # there the plain path multiplies every row by every sequence's cells and masks the others out,
        # where flash attention skips them. On an Ice Lake Xeon, the demo model, a 5,000-token sequence
        # beside 7 lanes of 300 tokens: 95 against 128 ms a step, the 7 alone 51 against 128; beside 7 of
        # 1,200 (where split lanes are a third cheaper without it): 174 against 245, and 124 against 237
        # (benchmarks/attention_by_context.py --widened).
        kernel = "on" if self.attention_curve is not None else self.flash_attn
        self._relayout(Layout.checked(True, self.max_lanes, None, kernel),
                       f"unified KV (widened from split for {why})",
                       "the KV could not be made unified for a longer request")
        self.narrows_to = lane
        if self.flash_attn != split_attention[0]:
            self._split_attention = split_attention
            self._set_reason(f"{self.flash_attn}: the KV widened to one pool, where the plain path's attention "
                             f"reads every sequence's cells for each row and flash attention its own")

    def _narrow(self, why: str) -> None:
        """A widened layout turns split again, once no request needs more than a lane's share: every live
        token's attention then walks only its own lane's cells. It may widen again later."""
        if not self.narrows_to:
            raise EngineError("this engine's KV was not widened from split: it has no split layout to go back to")
        # Where the split context cannot come back, the unified one stays for good.
        lane, self.narrows_to = self.narrows_to, 0
        split_attention, self._split_attention = self._split_attention, None
        kernel = split_attention[0] if split_attention is not None else self.flash_attn
        self._relayout(Layout.checked(False, self.max_lanes, self._split_slots, kernel),
                       f"split KV ({lane} tokens a lane; back from unified {why})", "the KV could not be made split again")
        if split_attention is not None:
            self._set_reason(split_attention[1])
        self.widens = True

    def _switch_attention(self, setting: str | None, why: str) -> None:
        """The other attention kernel, for the contexts being served: llama.cpp fixes the kernel, and the
        V cache's layout, per context."""
        if setting not in ("on", "off") or setting == self.flash_attn:
            raise EngineError(f"cannot switch flash attention from {self.flash_attn!r} to {setting!r}")
        self._relayout(dataclasses.replace(self._context.layout, flash_attn=setting), self.layout_note,
                       "the attention kernel could not be switched")
        self._set_reason(f"{setting}: switched {why}")

    def _set_reason(self, reason: str) -> None:
        self.flash_attn_reason = reason
        self.facts = self._read_facts()

    def _relayout(self, layout: Layout, note: str, failure: str) -> None:
        self._require_open()
        started = time.perf_counter()
        before, before_note = self._context.layout, self.layout_note
        self._sequences.drop_all()
        self._context.close()
        try:
            self._open(layout, note)
        except ModelLoadError as exc:
            log.error("%s (%s); keeping the context it had", failure, exc)
            self._open(before, before_note)
            raise EngineError(f"{failure}: {exc}") from None
        log.info("KV layout: %s, flash attention %s; context %d tokens for one request (new context in %.2f s)",
                 self.layout_note, self.flash_attn, self.max_context, time.perf_counter() - started)

    # ----- life -----

    def _require_open(self) -> None:
        if self._context is None or not self._context.ptr:
            raise EngineError("the engine is closed")

    def close(self) -> None:
        if self._sequences is not None:
            self._sequences.drop_all()
        if self._prefix_keeper is not None:
            self._prefix_keeper.close()
        if self._context is not None:
            self._context.close()
        if self._model is not None:
            self._model.close()

    def __enter__(self) -> LlamaEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
