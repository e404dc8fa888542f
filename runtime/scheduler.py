"""One scheduler for every policy: a waiting queue, lanes, chunked prefill and a KV budget.

Each step is planned in two halves, as in vLLM's v1 scheduler: `schedule()` turns lane state into
a StepPlan (decode and padding rows first, then prompt chunks within the prefill budget), and
`update()` folds the engine's samples back into the requests. A request has no prefill or decode
phase of its own; it has `num_computed_tokens` catching up with `num_tokens`.

Prefix reuse: a request that finishes (stopped or length) leaves its KV resident in the prefix
cache instead of releasing it. When a request gets its first prompt chunk, it takes the longest
prefix held by a cached sequence (adopted in place when the whole entry matches or it is the same
agent's, else copied) or by a live sequence (copied), and starts with num_computed_tokens = that
length. The cache keeps at most one finished sequence per lane of width. An engine that cannot copy
(llama.cpp's split KV) only adopts, and holds live and cached sequences in one pool of ids, so a lane
that starts evicts a cached sequence when the pool (within the width) is full. Cached KV is accounted
separately (kv_cached) and always yields: entries are evicted, least recently used first, whenever
live sequences need the room, before anything live is preempted.

Hybrid and recurrent models (the engine has `checkpoints`): a sequence's recurrent state is exact
only where it stands, so a match is cut back to where its source can resume (runtime.resume), and
prompt chunks end at checkpoint boundaries, where the engine keeps the state for later requests.
A fixed recurrent state per sequence (`sequence_state_tokens`, in KV-token equivalents) is counted
for every sequence held, live or cached, whatever its length.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from runtime.config import SchedulerConfig
from runtime.engine import PrefixOp, PrefixOpKind, Row, RowKind, StepPlan, StepResult
from runtime.agent_service import AgentService
from runtime.policies import Policy
from runtime.policy_registry import make_policy
from runtime.prefix_cache import MIN_MATCH_TOKENS, CacheEntry, PrefixCache, as_tokens, common_prefix_len
from runtime.request import Request, RequestOutput, RequestStatus
from runtime.resume import Resumption
from runtime.stats import (
    LANE_DECODE,
    LANE_EMPTY,
    LANE_PADDING,
    LANE_PREFILL,
    LANE_STALLED,
    StepStats,
)

log = logging.getLogger(__name__)

_CACHEABLE = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)
_ROW_LANE_STATE = {RowKind.DECODE: LANE_DECODE, RowKind.PREFILL: LANE_PREFILL, RowKind.PADDING: LANE_PADDING}


class RequestRejected(ValueError):
    """The request can never run here (it would not fit the context or the KV budget)."""


@dataclass(slots=True, eq=False)
class Lane:
    index: int
    request: Request | None = None
    # The request finished but its lane keeps riding the step (naive static).
    padding: bool = False
    padding_tokens: int = 0
    admitted_seq: int = 0
    # The request has been looked up in the prefix cache since it entered this lane.
    prefix_checked: bool = False

    @property
    def kv_tokens(self) -> int:
        return self.request.num_computed_tokens + self.padding_tokens if self.request else 0

    @property
    def is_live(self) -> bool:
        return self.request is not None and not self.padding


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        *,
        kv_capacity: int,
        max_context: int,
        max_step_tokens: int = 1 << 30,
        max_lanes: int = 256,
        max_cached_sequences: int = 0,
        max_sequences: int | None = None,
        copies_prefixes: bool = True,
        checkpoints=None,
        sequence_state_tokens: int = 0,
        turn_end_tokens: frozenset[int] = frozenset(),
    ) -> None:
        self.kv_capacity = kv_capacity
        self.max_context = max_context
        self.max_step_tokens = max_step_tokens
        self.max_lanes = max_lanes
        self.config = self._checked(config)
        self.policy: Policy = make_policy(config.policy)
        # Per-agent service, kept across policy switches: the agent-aware policies rank by it.
        self.service = AgentService()
        self.waiting: deque[Request] = deque()
        self.lanes: list[Lane] = [Lane(i) for i in range(config.max_batch)]
        self.num_steps = 0
        self._lane_of: dict[int, Lane] = {}
        self._release: list[Request] = []
        self._outputs: list[tuple[Request, RequestOutput]] = []
        self._admissions = 0
        self._finished_since_step = 0
        self._e2e: list[tuple[str, float]] = []
        # 0 means the engine takes no prefix ops: no reuse at all.
        self.prefix_cache = PrefixCache(max_cached_sequences)
        self.max_sequences = max_sequences
        self.copies_prefixes = copies_prefixes
        # CACHE ops wait here until a plan the engine will run; match ops go out with their rows.
        self._ops: list[PrefixOp] = []
        self._prefix_queries = self._prefix_hits = 0
        self._prefix_agents: dict[str, list[int]] = {}
        # Cached sequences evicted (least recently used first) to make room for live ones.
        self.num_evictions = 0
        # None for attention models: any prefix of a sequence can be reused.
        self.resumption = Resumption(checkpoints, turn_end_tokens) if checkpoints is not None else None
        self.sequence_state_tokens = sequence_state_tokens

    @classmethod
    def for_engine(cls, config: SchedulerConfig, engine) -> Scheduler:
        """A scheduler sized to what the engine holds, prefix cache included."""
        return cls(
            config,
            kv_capacity=engine.kv_capacity,
            max_context=engine.max_context,
            max_step_tokens=engine.max_step_tokens,
            max_lanes=engine.max_lanes,
            max_cached_sequences=getattr(engine, "max_cached_sequences", 0),
            max_sequences=getattr(engine, "max_sequences", None),
            copies_prefixes=getattr(engine, "copies_prefixes", True),
            checkpoints=getattr(engine, "checkpoints", None),
            sequence_state_tokens=getattr(engine, "sequence_state_tokens", 0),
            turn_end_tokens=getattr(engine, "turn_end_tokens", frozenset()),
        )

    # -- public surface ------------------------------------------------------------------------

    @property
    def kv_budget(self) -> int:
        budget = self.config.kv_budget
        return self.kv_capacity if budget is None else min(budget, self.kv_capacity)

    @property
    def kv_used(self) -> int:
        return sum(lane.kv_tokens + self.sequence_state_tokens for lane in self.lanes if lane.request is not None)

    @property
    def kv_cached(self) -> int:
        """KV tokens held by finished sequences kept for prefix reuse (not part of kv_used)."""
        return self.prefix_cache.num_tokens + self.sequence_state_tokens * len(self.prefix_cache)

    @property
    def reuse_enabled(self) -> bool:
        return self.config.prefix_cache and self.prefix_cache.max_entries > 0

    @property
    def num_occupied_lanes(self) -> int:
        return sum(1 for lane in self.lanes if lane.request is not None)

    @property
    def num_running(self) -> int:
        return sum(1 for lane in self.lanes if lane.is_live)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self._lane_of or self._release)

    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        total = num_prompt_tokens + max_tokens
        if total > self.max_context:
            raise RequestRejected(
                f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {total} tokens, "
                f"more than the context of {self.max_context}"
            )
        if total + self.sequence_state_tokens > self.kv_budget:
            state = f" and a recurrent state worth {self.sequence_state_tokens}" if self.sequence_state_tokens else ""
            raise RequestRejected(
                f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) needs {total} KV tokens{state}, "
                f"more than the KV budget of {self.kv_budget}"
            )

    def add(self, request: Request, now: float) -> None:
        self.check_fits(request.num_prompt_tokens, request.sampling.max_tokens)
        request.arrival_time = now
        request.status = RequestStatus.WAITING
        self.service.arrived(request)
        self.waiting.append(request)

    def abort(self, request_id: int, now: float, error: str | None = None) -> Request | None:
        """Ends a request wherever it is; returns it, or None when it is unknown or already done."""
        status = RequestStatus.FINISHED_ERROR if error else RequestStatus.FINISHED_ABORTED
        lane = self._lane_of.get(request_id)
        if lane is not None:
            if not lane.is_live:
                return None
            request = lane.request
            self._finish_in_lane(lane, status, now, error)
            if self.policy.pads_finished_lanes and not self.num_running:
                self._end_padding()
            return request
        for request in self.waiting:
            if request.request_id == request_id:
                self.waiting.remove(request)
                self._finish(request, status, now, error)
                return request
        return None

    def reconfigure(self, config: SchedulerConfig, now: float) -> None:
        """Applies new knobs; called only between steps."""
        config = self._checked(config)
        old, self.config = self.config, config
        if config.policy != old.policy:
            log.info("policy %s -> %s at step %d", old.policy, config.policy, self.num_steps)
            self.policy = make_policy(config.policy)
            if not self.policy.pads_finished_lanes:
                self._end_padding()
        while len(self.lanes) < config.max_batch:
            self.lanes.append(Lane(len(self.lanes)))
        self._trim_lanes()
        self._fail_unfittable(now)
        if not config.prefix_cache:
            self.drop_prefix_cache()

    def drop_prefix_cache(self) -> None:
        """Releases every cached sequence (live ones are untouched)."""
        for entry in self.prefix_cache.clear():
            self._drop_entry(entry)

    def fail_unqueued(self, request: Request, now: float, message: str) -> None:
        """Ends a request that never made it into the queue, so its listener still hears."""
        self._finish(request, RequestStatus.FINISHED_ERROR, now, message)

    def end_batch(self) -> None:
        """Releases every padding lane, as when a static batch's last live sequence ends."""
        self._end_padding()

    def handle_kv_full(self, now: float) -> None:
        """The engine had less room than the budget promised: shrink the budget to what it holds."""
        used = self.kv_used + self.kv_cached
        if used < self.kv_budget:
            log.warning("KV budget lowered from %d to %d tokens after the engine ran out", self.kv_budget, used)
            self.kv_capacity = max(used, 1)
        if self._evict_one():
            return
        if not self._preempt_one():
            newest = max((lane for lane in self.lanes if lane.is_live), key=lambda lane: lane.admitted_seq, default=None)
            if newest is not None:
                self._finish_in_lane(newest, RequestStatus.FINISHED_ERROR, now, "the engine ran out of KV cache")

    def take_outputs(self) -> list[tuple[Request, RequestOutput]]:
        outputs, self._outputs = self._outputs, []
        return outputs

    def next_admission_time(self) -> float | None:
        return self.policy.next_admission_time(self)

    # -- planning ------------------------------------------------------------------------------

    def schedule(self, now: float) -> StepPlan:
        self._trim_lanes()
        if self.prefix_cache and not self.reuse_enabled:
            self.drop_prefix_cache()
        self._fit_cache(0)
        self.policy.admit(self, now)
        rows = self._plan_rows()
        # A sequence that is the source of a copy this step is released only in the next plan.
        sources = {op.source.request_id for op in self._ops if op.kind is not PrefixOpKind.CACHE}
        release = [r for r in self._release if r.request_id not in sources]
        if not rows and not release and not self._ops:
            return StepPlan()
        plan = StepPlan(rows=rows, release=release, prefix_ops=self._ops)
        self._release = [r for r in self._release if r.request_id in sources]
        self._ops = []
        assert plan.num_tokens <= self.max_step_tokens, "plan exceeds the engine's step size"
        assert self.kv_used + self.kv_cached + plan.num_tokens <= self.kv_budget or not rows, \
            "plan exceeds the KV budget"
        return plan

    def fill_free_lanes(self) -> None:
        """Admits waiting requests, oldest first, into free lanes while their prompts fit the KV left."""
        if not self.waiting:
            return
        live = [lane for lane in self.lanes if lane.is_live]
        # Admitted prompts are promised their KV; one token of headroom per live lane for its next decode.
        free = self.kv_budget - self.kv_used - self.kv_cached - len(live)
        free -= sum(lane.request.num_tokens - lane.request.num_computed_tokens for lane in live)
        for lane in self.lanes[: self.config.max_batch]:
            if not self.waiting:
                break
            if lane.request is not None:
                continue
            request = self.waiting[0]
            need = request.num_tokens + 1 + self.sequence_state_tokens
            # A cached sequence it will adopt moves from kv_cached to kv_used instead of being computed.
            adopt = self._adoptable(request)
            if adopt is not None:
                need -= adopt.num_tokens + self.sequence_state_tokens
            while need > free and (entry := self.prefix_cache.pop_lru(keep=adopt)) is not None:
                self.num_evictions += 1
                self._drop_entry(entry)
                free += entry.num_tokens + self.sequence_state_tokens
            if need > free:
                break
            self.waiting.popleft()
            free -= need
            self._admissions += 1
            lane.request, lane.padding, lane.padding_tokens = request, False, 0
            lane.prefix_checked = False
            lane.admitted_seq = self._admissions
            request.status = RequestStatus.RUNNING
            self._lane_of[request.request_id] = lane

    def _plan_rows(self) -> list[Row]:
        while True:
            one_token_lanes = [
                lane for lane in self.lanes if lane.request and (lane.padding or lane.request.is_decoding)
            ]
            free = self._kv_free()
            if len(one_token_lanes) <= free:
                break
            if not self._evict_one() and (self.policy.pauses_lanes or not self._preempt_one()):
                break
        rows: list[Row] = []
        for lane in self.policy.lanes_to_run(self, one_token_lanes, max(free, 0)):
            request = lane.request
            if lane.padding:
                position = request.num_computed_tokens + lane.padding_tokens
                rows.append(Row(request, RowKind.PADDING, position, [request.token_ids[-1]], sample=True))
            else:
                start = request.num_computed_tokens
                rows.append(Row(request, RowKind.DECODE, start, request.token_ids[start:], sample=True))
        budget = min(self.config.prefill_chunk, self.max_step_tokens - len(rows))
        planned = len(rows)
        prefilling = self.policy.prefill_order(self, sorted(
            (lane for lane in self.lanes if lane.is_live and not lane.request.is_decoding),
            key=lambda lane: lane.admitted_seq,
        ))
        computing: list[Request] = []
        for lane in prefilling:
            if budget <= 0 or not self._make_room(planned + 1):
                break
            request = lane.request
            if not lane.prefix_checked:
                if self.reuse_enabled and self._prefix_in_progress(request, computing):
                    continue
                lane.prefix_checked = True
                if self.reuse_enabled:
                    self._reuse_prefix(lane, planned)
                self._make_sequence_room()
            start = request.num_computed_tokens
            want = min(request.num_tokens - start, budget)
            self._make_room(planned + want)
            n = min(want, self._kv_free() - planned)
            end, checkpoint = start + n, False
            if self.resumption is not None and self.reuse_enabled:
                end, checkpoint = self.resumption.chunk_end(request, start, end)
                n = end - start
            rows.append(Row(request, RowKind.PREFILL, start, request.token_ids[start:end], end == request.num_tokens,
                            checkpoint=checkpoint))
            budget -= n
            planned += n
            computing.append(request)
        if not rows and self.num_running and self._preempt_one():
            return self._plan_rows()
        return rows

    # -- prefix cache ---------------------------------------------------------------------------

    def _kv_free(self) -> int:
        return self.kv_budget - self.kv_used - self.kv_cached

    def _make_room(self, tokens: int, keep: CacheEntry | None = None) -> bool:
        """Evicts cached sequences, coldest first, until `tokens` fit; says whether they do."""
        while self._kv_free() < tokens:
            if not self._evict_one(keep):
                return False
        return True

    def _make_sequence_room(self) -> None:
        """Evicts cached sequences until the engine's pool of ids holds them and every started lane's.

        Called as a lane starts (its first chunk, after any adoption), so a lane that was admitted
        counting on an entry someone else took still finds an id.
        """
        if self.max_sequences is None:
            return
        pool = self.max_sequences
        if not self.copies_prefixes:
            # Split KV runs a step as one ubatch only over consecutive sequence ids: holding live and
            # cached sequences within the width keeps the ids in use low and gap-free, as llama-server's slots.
            pool = min(pool, self.config.max_batch)
        started = sum(lane.request is not None and (lane.prefix_checked or lane.padding) for lane in self.lanes)
        while started + len(self.prefix_cache) > pool and self._evict_one():
            pass

    def _fit_cache(self, tokens: int) -> None:
        self._make_room(tokens)

    def _evict_one(self, keep: CacheEntry | None = None) -> bool:
        entry = self.prefix_cache.pop_lru(keep)
        if entry is None:
            return False
        self.num_evictions += 1
        self._drop_entry(entry)
        return True

    def _drop_entry(self, entry: CacheEntry) -> None:
        """Releases an entry no longer in the cache, cancelling its CACHE op if the engine has not seen it."""
        handle = entry.handle
        self._ops = [op for op in self._ops if not (op.kind is PrefixOpKind.CACHE and op.source is handle)]
        self._release.append(handle)

    def _cache(self, request: Request, padded: bool = False) -> None:
        n = request.num_computed_tokens
        if padded and self.resumption is not None:
            # Padding rows moved the recurrent state past n: keep the sequence only up to a checkpoint.
            n = self.resumption.checkpoints.longest(as_tokens(request.token_ids), n)
        # At most one finished sequence per lane of width, as llama-server's slots each keep their last
        # prompt: llama.cpp attends over idle cells too (masked), so idle KV beyond that slows every step.
        for entry in self.prefix_cache.insert(request, n, limit=self.config.max_batch):
            self._drop_entry(entry)
        if self.prefix_cache.get(request) is None:
            self._release.append(request)
        else:
            self._ops.append(PrefixOp(PrefixOpKind.CACHE, request, None, n))

    def _adoptable(self, request: Request) -> CacheEntry | None:
        """The cached entry this request would adopt in place, if any."""
        if not self.reuse_enabled or not self.prefix_cache:
            return None
        tokens = as_tokens(request.token_ids)
        match = self.prefix_cache.longest_match(tokens, request.num_tokens - 1, resume=self._resume_fn(tokens))
        if match is None or not self._adopts(request, match.source, match.num_tokens):
            return None
        return match.source

    def _adopts(self, request: Request, entry: CacheEntry, n: int) -> bool:
        # Adopting drops the entry's tokens past n: fine when there are none, or when they are the
        # same agent's previous turn (its next turn is the only likely user). Otherwise copy, where
        # the engine can.
        return (not self.copies_prefixes or n == entry.num_tokens
                or (entry.agent == request.agent and request.agent != "anonymous"))

    def _prefix_in_progress(self, request: Request, computing: list[Request]) -> bool:
        """An earlier prompt computing in this very step will hold more of this one's prefix: wait for it."""
        if not computing or not self.copies_prefixes:
            return False
        tokens = as_tokens(request.token_ids)
        resume = self._resume_fn(tokens) or (lambda n, held: n)
        best_held = 0
        best_coming = 0
        for other in computing:
            shared = common_prefix_len(tokens, as_tokens(other.token_ids[: other.num_prompt_tokens]))
            computed = other.num_computed_tokens
            best_held = max(best_held, resume(min(shared, computed), computed) if shared else 0)
            if self.resumption is None:
                best_coming = max(best_coming, shared)
            else:
                # A recurrent state can be handed on only where the other prompt leaves a checkpoint.
                best_coming = max([best_coming, *(b for b in self.resumption.boundaries(other) if b <= shared)])
        for entry in self.prefix_cache:
            shared = common_prefix_len(tokens, entry.tokens)
            best_held = max(best_held, resume(shared, entry.num_tokens) if shared else 0)
        return best_coming >= MIN_MATCH_TOKENS and best_coming > best_held

    def _resume_fn(self, tokens):
        """resume(n, held) for PrefixCache.longest_match: None where any prefix can be reused."""
        if self.resumption is None:
            return None
        return lambda n, held: self.resumption.point(tokens, n, held)

    def _reuse_prefix(self, lane: Lane, planned: int) -> None:
        """Starts the lane's request at its longest resident prefix, with the op that puts it there."""
        request = lane.request
        counts = self._prefix_agents.setdefault(request.agent, [0, 0])
        self._prefix_queries += request.num_tokens
        counts[0] += request.num_tokens
        live = [
            (other.request, as_tokens(other.request.token_ids[: other.request.num_computed_tokens]))
            for other in self.lanes
            if self.copies_prefixes and other.request is not None and other is not lane
            and other.request.num_computed_tokens >= MIN_MATCH_TOKENS
            # A padding lane's recurrent state is past its last real token.
            and not (other.padding and self.resumption is not None)
        ]
        tokens = as_tokens(request.token_ids)
        match = self.prefix_cache.longest_match(tokens, request.num_tokens - 1, live, resume=self._resume_fn(tokens))
        if match is None:
            return
        n = match.num_tokens
        source = match.source
        if isinstance(source, CacheEntry) and self._adopts(request, source, n):
            self.prefix_cache.remove(source)
            op = PrefixOp(PrefixOpKind.ADOPT, source.handle, request, n)
        else:
            # A copy holds its own count of the shared tokens; skip it if even an empty cache has no room.
            keep = source if isinstance(source, CacheEntry) else None
            if not self._make_room(planned + n + 1, keep=keep):
                return
            if keep is not None:
                self.prefix_cache.touch(keep)
            handle = source.handle if isinstance(source, CacheEntry) else source
            op = PrefixOp(PrefixOpKind.COPY, handle, request, n)
        self._ops.append(op)
        request.num_computed_tokens = request.num_cached_tokens = n
        self._prefix_hits += n
        counts[1] += n

    # -- preemption ----------------------------------------------------------------------------

    def _preempt_one(self) -> bool:
        """Frees KV under pressure: padding lanes first, then the newest live request (recomputed later)."""
        for lane in self.lanes:
            if lane.padding:
                self._release_lane(lane)
                return True
        live = [lane for lane in self.lanes if lane.is_live]
        if len(live) <= 1:
            return False
        victim = self.policy.preemption_victim(self, live)
        request = victim.request
        log.info("preempting request %d (KV budget %d spent)", request.request_id, self.kv_budget)
        self._release_lane(victim)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
        return True

    # -- folding results back -----------------------------------------------------------------

    def update(self, plan: StepPlan, result: StepResult, now: float) -> StepStats:
        self.num_steps += 1
        useful = decode_rows = prefill_rows = prefill_tokens = padding_rows = 0
        ttft: list[tuple[str, float]] = []
        itl: list[tuple[str, float]] = []
        lane_states = [LANE_EMPTY if lane.request is None else LANE_STALLED for lane in self.lanes]
        self.apply_refusals(result)
        self.service.record_step(plan.rows, result, self.config.agent_weights)
        for request_id, error in result.errors.items():
            # A prefix op the engine could not apply fails its request even without a row.
            lane = self._lane_of.get(request_id)
            if lane is not None and lane.is_live and all(r.request is not lane.request for r in plan.rows):
                self._finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, error)
        for row in plan.rows:
            request = row.request
            if request.request_id in result.refused:
                continue
            lane = self._lane_of[request.request_id]
            if row.kind is RowKind.PADDING:
                padding_rows += 1
                lane.padding_tokens += 1
                lane_states[lane.index] = LANE_PADDING
                continue
            lane_states[lane.index] = _ROW_LANE_STATE[row.kind]
            if row.kind is RowKind.DECODE:
                decode_rows += 1
            else:
                prefill_rows += 1
                prefill_tokens += len(row.tokens)
            error = result.errors.get(request.request_id)
            if error is not None:
                self._finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, error)
                continue
            request.num_computed_tokens += len(row.tokens)
            if not row.sample:
                continue
            sample = result.samples.get(request.request_id)
            if sample is None:
                self._finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now, "the engine returned no token")
                continue
            useful += 1
            if request.first_token_time is None:
                request.first_token_time = now
                ttft.append((request.agent, now - request.arrival_time))
            else:
                itl.append((request.agent, now - request.last_token_time))
            request.last_token_time = now
            request.token_ids.append(sample.token)
            request.output_text_parts.append(sample.text)
            status = None
            if sample.stop:
                status = RequestStatus.FINISHED_STOPPED
            elif request.num_output_tokens >= request.sampling.max_tokens or request.num_tokens >= self.max_context:
                status = RequestStatus.FINISHED_LENGTH
            if status is None:
                self._outputs.append((request, RequestOutput(request.request_id, [sample.token], sample.text, False)))
            else:
                self._finish_in_lane(lane, status, now, None, new_token=sample)
        if self.policy.pads_finished_lanes and not self.num_running:
            self._end_padding()
        return self._stats(result.duration_s, now, useful, decode_rows, prefill_rows, prefill_tokens,
                           padding_rows, "".join(lane_states), ttft, itl)

    def apply_refusals(self, result: StepResult) -> None:
        """Prefix ops the engine's memory could not do: their destinations recompute from position 0,
        and a finished sequence it could not keep leaves the cache."""
        for request_id, why in result.refused.items():
            lane = self._lane_of.get(request_id)
            if lane is not None and lane.is_live:
                request = lane.request
                log.warning("request %d recomputes its prompt: %s", request_id, why)
                self._prefix_hits -= request.num_cached_tokens
                self._prefix_agents.get(request.agent, [0, 0])[1] -= request.num_cached_tokens
                request.num_computed_tokens = request.num_cached_tokens = 0
            else:
                self.prefix_cache.discard(request_id)

    def _stats(self, duration, now, useful, decode_rows, prefill_rows, prefill_tokens, padding_rows,
               lanes, ttft, itl) -> StepStats:
        finished, self._finished_since_step = self._finished_since_step, 0
        e2e, self._e2e = self._e2e, []
        queries, hits, agents = self._prefix_queries, self._prefix_hits, self._prefix_agents
        self._prefix_queries = self._prefix_hits = 0
        self._prefix_agents = {}
        live = decode_rows + prefill_rows + lanes.count(LANE_STALLED)
        return StepStats(
            index=self.num_steps,
            time=now,
            duration=duration,
            policy=self.policy.name,
            max_batch=self.config.max_batch,
            width_held=live + padding_rows,
            live_lanes=live,
            padding_lanes=padding_rows,
            decode_rows=decode_rows,
            prefill_rows=prefill_rows,
            prefill_tokens=prefill_tokens,
            useful_tokens=useful,
            queue_depth=len(self.waiting),
            kv_used=self.kv_used,
            kv_capacity=self.kv_budget,
            kv_cached=self.kv_cached,
            cached_sequences=len(self.prefix_cache),
            checkpoints=len(self.resumption.checkpoints) if self.resumption else 0,
            checkpoint_bytes=self.resumption.checkpoints.num_bytes if self.resumption else 0,
            checkpoint_budget_bytes=self.resumption.checkpoints.budget_bytes if self.resumption else 0,
            prefix_queries=queries,
            prefix_hits=hits,
            prefix_agents=[(agent, q, h) for agent, (q, h) in agents.items()],
            finished=finished,
            lanes=lanes,
            ttft=ttft,
            itl=itl,
            e2e=e2e,
        )

    # -- lane and request endings -------------------------------------------------------------

    def _finish_in_lane(self, lane: Lane, status: RequestStatus, now: float, error: str | None,
                        new_token=None) -> None:
        request = lane.request
        self._finish(request, status, now, error, new_token)
        if self.policy.pads_finished_lanes and status is not RequestStatus.FINISHED_ERROR:
            lane.padding = True
        else:
            self._release_lane(lane, cache=True)

    def _finish(self, request: Request, status: RequestStatus, now: float, error: str | None,
                new_token=None) -> None:
        request.status = status
        request.error = error
        request.finished_time = now
        self.service.left(request)
        self._finished_since_step += 1
        if status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH):
            self._e2e.append((request.agent, now - request.arrival_time))
        tokens, text = ([new_token.token], new_token.text) if new_token else ([], "")
        self._outputs.append(
            (request, RequestOutput(request.request_id, tokens, text, True, status.finish_reason, error))
        )

    def _release_lane(self, lane: Lane, cache: bool = False) -> None:
        """Frees the lane; a finished request's KV goes to the prefix cache when `cache` and reuse allow."""
        request = lane.request
        if request is not None:
            self._lane_of.pop(request.request_id, None)
            if cache and self.reuse_enabled and request.status in _CACHEABLE:
                self._cache(request, padded=lane.padding_tokens > 0)
            else:
                self._release.append(request)
        lane.request, lane.padding, lane.padding_tokens = None, False, 0

    def _end_padding(self) -> None:
        """A static batch ended: its finished lanes' KV goes to the prefix cache (or is released)."""
        for lane in self.lanes:
            if lane.padding:
                self._release_lane(lane, cache=True)

    def _trim_lanes(self) -> None:
        while len(self.lanes) > self.config.max_batch and self.lanes[-1].request is None:
            self.lanes.pop()

    def _fail_unfittable(self, now: float) -> None:
        budget = min(self.kv_budget, self.max_context)
        for request in [r for r in self.waiting if r.max_total_tokens > budget]:
            self.waiting.remove(request)
            self._finish(request, RequestStatus.FINISHED_ERROR, now,
                         f"request needs {request.max_total_tokens} KV tokens, more than the new budget of {budget}")
        for lane in [lane for lane in self.lanes if lane.is_live and lane.request.max_total_tokens > budget]:
            self._finish_in_lane(lane, RequestStatus.FINISHED_ERROR, now,
                                 f"request needs {lane.request.max_total_tokens} KV tokens, more than the new "
                                 f"budget of {budget}")

    def _checked(self, config: SchedulerConfig) -> SchedulerConfig:
        if config.max_batch > self.max_lanes:
            raise ValueError(f"max_batch {config.max_batch} exceeds the engine's {self.max_lanes} lanes")
        return config
