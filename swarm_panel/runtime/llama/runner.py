"""One step on the llama engine: the rows laid out in one llama_batch, llama_decode (with split KV, a
few calls where one stream is far fuller than the rest: runtime.llama.cpu_tuning.followers), and
each row's token sampled. Prefix ops and releases have run before (runtime.llama.engine.step).
"""

from __future__ import annotations

import ctypes
import logging
import time
from functools import partial
from itertools import accumulate, chain
from operator import attrgetter, itemgetter

import llama_cpp
import numpy as np

from swarm_panel.runtime.core.black_box import black_box
from swarm_panel.runtime.core.engine import EngineError, KVCacheFull, Row, RowKind, Sample, StepResult
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.context import MemoryRefused
from swarm_panel.runtime.llama.cpu_tuning.followers import RowSpan, plan_calls, ubatch_features
from swarm_panel.runtime.llama.model import LlamaModel, take_recent_problems
from swarm_panel.runtime.llama.sampling import (
    GreedySampler,
    build_backend_sampler,
    build_sampler,
    choose_rows,
    runs_on_backend,
    token_logprob,
)
from swarm_panel.runtime.llama.sequences import Lane, Sequences
from swarm_panel.runtime.reuse.saved_states import PrefixKeeper

log = logging.getLogger(__name__)

_TOKENS = attrgetter("tokens")


class StepRunner:
    """Runs the rows of one step on a context's sequences; made anew with each context."""

    def __init__(self, model: LlamaModel, seqs: Sequences, keeper: PrefixKeeper | None, *,
                 backend_sampling: bool, computes_async: bool) -> None:
        self.model = model
        self.vocab = model.vocab
        self.seqs = seqs
        self.context = seqs.context
        self.memory = seqs.memory
        self.keeper = keeper
        self.backend_sampling = backend_sampling
        self.computes_async = computes_async
        # Steps run as more than one llama_decode call.
        self.split_steps = 0
        # The step being run's times (runtime.serving.metrics.StepAccount), filled in as it runs.
        self._times = StepResult({}, 0.0)
        # The step's host work to run while the device computes (StepPlan.while_computing), until it has run.
        self._while_computing = None

    def run(self, rows: list[Row], errors: dict[int, str], while_computing) -> StepResult:
        self._times = times = StepResult({}, 0.0)
        self._while_computing = while_computing
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
        times.samples, times.errors = samples, errors
        return times

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
                lane = self.seqs.lane_for(row.request)
                self.memory.check_row(lane.seq_id, row.start)
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
        n, max_context = len(row.tokens), self.context.max_context
        if not n:
            raise ValueError("a row needs at least one token")
        if row.start < 0 or row.start + n > max_context:
            raise ValueError(f"positions {row.start}..{row.start + n - 1} exceed the context "
                             f"of {max_context} tokens")
        if not tokens_checked and (min(row.tokens) < 0 or max(row.tokens) >= self.vocab.n_tokens):
            raise ValueError(f"token ids must be within 0..{self.vocab.n_tokens - 1}")

    def _prepare_sampling(self, request: Request, lane: Lane) -> None:
        if lane.sampler is not None:
            return
        sampling = request.sampling
        eog_tokens = self.vocab.eog_tokens
        eog = eog_tokens if sampling.ignore_eos else ()
        output = [t for t in request.output_token_ids if t not in eog_tokens] if sampling.grammar else ()
        if self.backend_sampling and runs_on_backend(sampling):
            lane.sampler = build_backend_sampler(sampling, self.vocab.n_tokens, eog, request.token_ids)
            lane.on_backend = bool(llama_cpp.llama_set_sampler(self.context.ptr, lane.seq_id, lane.sampler.chain))
            if lane.on_backend:
                return
            # llama.cpp refused it (its log says why): the host samples this request.
            self.seqs.close_sampler(lane)
        vocab = llama_cpp.llama_model_get_vocab(self.model.ptr)
        lane.sampler = build_sampler(sampling, self.vocab.n_tokens, eog, request.token_ids, vocab, output)

    def _calls(self, admitted: list[tuple[int, Row]]) -> list[list[tuple[int, Row]]]:
        """The step's llama_decode calls (runtime.llama.cpu_tuning.followers): with split KV, rows whose stream is far
        fuller than their neighbours' may run apart; a unified pool spans the same cells for every row."""
        call_cost = self.context.call_cost
        if self.seqs.kv_unified or call_cost is None or len(admitted) < 2:
            return [admitted]
        spans = [RowSpan(seq_id, row.start + 1, len(row.tokens) > 1) for seq_id, row in admitted]
        calls = plan_calls(spans, call_cost.for_step(), self.context.max_context)
        if len(calls) > 1:
            self.split_steps += 1
        return [[admitted[i] for i in call] for call in calls]

    def _run_call(self, call: list[tuple[int, Row]], samples: dict[int, Sample]) -> None:
        to_sample = self._fill_batch(call)
        batch = self.context.tokens.batch
        if not batch.n_tokens:
            return
        started = time.perf_counter()
        self._decode(call)
        elapsed = time.perf_counter() - started
        call_cost = self.context.call_cost
        if call_cost is not None and not self.seqs.kv_unified and batch.n_tokens == len(call):
            spans = [RowSpan(seq_id, row.start + 1) for seq_id, row in call]
            call_cost.observe(*ubatch_features(spans, self.context.max_context), elapsed)
        outputs = self.context.tokens.num_outputs
        lanes = self.seqs.lanes
        host_logits = outputs and not all(lanes[row.request.request_id].on_backend for _, row in call)
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
        lanes, ctx = self.seqs.lanes, self.context.ptr
        greedy = []
        if outputs:
            greedy = [(index, ordinal, row) for index, ordinal, row in to_sample
                      if isinstance(lanes[row.request.request_id].sampler, GreedySampler)]
        if greedy:
            pointer = ctypes.cast(llama_cpp.llama_get_logits(ctx), ctypes.POINTER(ctypes.c_float))
            logits = np.ctypeslib.as_array(pointer, shape=(outputs, self.vocab.n_tokens))
            tokens = choose_rows([lanes[row.request.request_id].sampler for _, _, row in greedy], logits,
                                 [ordinal for _, ordinal, _ in greedy])
            for (index, _, row), token in zip(greedy, tokens):
                samples[row.request.request_id] = self._sampled(row.request, index, token)
        for index, _, row in to_sample:
            if row.request.request_id not in samples:
                token = lanes[row.request.request_id].sampler.sample(ctx, index)
                samples[row.request.request_id] = self._sampled(row.request, index, token)

    def _take_back(self, done: list[tuple[int, Row]], samples: dict[int, Sample]) -> None:
        """A later call of the step found no KV room: the step keeps nothing, so the rows already run
        give back their cells and their samples (a sampler chain rebuilds from the request's tokens)."""
        for seq_id, row in done:
            self.memory.discard_from(seq_id, row.start)
            request = row.request
            if samples.pop(request.request_id, None) is None:
                continue
            self.seqs.close_sampler(self.seqs.lanes[request.request_id])
            if request.sampling.logprobs is not None:
                request.output_logprobs.pop()

    def _fill_batch(self, admitted: list[tuple[int, Row]]) -> list[tuple[int, int, Row]]:
        """Lays the rows out in the batch; returns (batch index, output row, row) for each row to sample."""
        rows = [row for _, row in admitted]
        lengths = [len(row.tokens) for row in rows]
        ends = list(accumulate(lengths))
        # Padding lanes cost what a real lane costs; their sample is thrown away.
        outputs = [end - 1 for end, row in zip(ends, rows) if row.sample or row.kind is RowKind.PADDING]
        self.context.tokens.fill(list(chain.from_iterable(map(_TOKENS, rows))), lengths,
                                 [row.start for row in rows], [seq_id for seq_id, _ in admitted], ends, outputs)
        ordinals = {index: ordinal for ordinal, index in enumerate(outputs)}
        return [(end - 1, ordinals[end - 1], row) for end, row in zip(ends, rows)
                if row.sample and row.kind is not RowKind.PADDING]

    def _decode(self, admitted: list[tuple[int, Row]]) -> None:
        memory, ctx, batch = self.memory, self.context.ptr, self.context.tokens.batch
        for seq_id, row in admitted:
            if row.checkpoint_start:
                memory.snapshot(seq_id, row.request.token_ids[:row.start])
        take_recent_problems()
        box = black_box()
        if box is not None:
            box.record(self._step_shape(admitted))
        wall, cpu = time.perf_counter(), time.thread_time()
        code = llama_cpp.llama_decode(ctx, batch)
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
            llama_cpp.llama_synchronize(ctx)
        times = self._times
        times.device_s += time.perf_counter() - wall
        times.device_cpu_s += time.thread_time() - cpu
        if code == 0:
            for seq_id, row in admitted:
                end = row.start + len(row.tokens)
                memory.advanced(seq_id, end)
                if row.checkpoint:
                    memory.snapshot(seq_id, row.request.token_ids[:end])
                if row.store_prefix and self.keeper is not None:
                    self.keeper.keep(row.request.token_ids[:end], partial(self._state_to_store, seq_id))
            return
        # llama.cpp restores the cache after code 1 and -1; after others, ubatches already
        # computed stay behind. Either way, nothing of this step may remain.
        for seq_id, row in admitted:
            memory.discard_from(seq_id, row.start)
        if code == 1:
            raise KVCacheFull(f"no KV cache room for a step of {batch.n_tokens} tokens "
                              f"(capacity {self.context.kv_capacity})")
        problems = "; ".join(take_recent_problems())
        raise EngineError(f"llama_decode failed with code {code}" + (f": {problems}" if problems else ""))

    def _state_to_store(self, seq_id: int) -> ctypes.Array | None:
        try:
            return self.memory.save(seq_id)
        except MemoryRefused as exc:
            log.warning("a prefix is not stored: %s", exc)
            return None

    def _step_shape(self, admitted: list[tuple[int, Row]]) -> str:
        """The llama_decode call about to run, in words a crash report can carry."""
        lanes = [self.seqs.lanes.get(row.request.request_id) for _, row in admitted]
        graph = sorted(lane.seq_id for lane in lanes if lane is not None and lane.on_backend)
        rows = ", ".join(f"seq {seq_id} @{row.start}+{len(row.tokens)}" for seq_id, row in admitted)
        return (f"llama_decode: {self.context.tokens.batch.n_tokens} tokens, {len(admitted)} sequences, "
                f"{self.context.tokens.num_outputs} outputs; samplers in the graph: "
                f"{', '.join(map(str, graph)) or 'none'} of {len(self.seqs.lanes)} lanes "
                f"(backend sampling {'on' if self.backend_sampling else 'off'}); rows: {rows}")

    def _sampled(self, request: Request, index: int, token: int) -> Sample:
        """The token and whether it ends generation; runtime.serving.detokenize makes its text."""
        end = token in self.vocab.eog_tokens
        if request.sampling.logprobs is not None:
            # On the request, not the Sample: the scheduler forwards only token and text.
            request.output_logprobs.append(token_logprob(self.context.ptr, index, self.vocab.n_tokens, token,
                                                         request.sampling.logprobs, self.vocab.piece, end))
        return Sample(token, end)
