"""The prefix planner: what the engine keeps resident beyond the live lanes, and how new prompts reuse it.

A request that finishes (stopped or length) leaves its KV resident as a cached prefix (a CACHE op)
instead of releasing it. When a request gets its first prompt chunk, it takes the longest prefix held
by a cached sequence (adopted in place when the whole entry matches or it is the same agent's, else
copied) or by a live sequence (copied), and starts with num_computed_tokens = that length. The cache
keeps at most one finished sequence per lane of width. An engine whose live and cached sequences share
one pool of ids (llama.cpp's split KV) gets a lane that starts evicting a cached sequence when the
pool (within the width) is full, and adopts instead of copying where no id is left for the copy. Cached KV always yields: entries are
evicted whenever live sequences need the room, before anything live is preempted: first the one whose
agent is expected back furthest from now, by its idle gaps so far (runtime.reuse.prefix_cache), the
least recently used among equals. Where the engine parks evicted sequences (`parks_evicted`: split KV), an evicted entry
stays in the cache as parked in host RAM (a PARK op), holding no cells and no id, and a request that
matches it gets it restored into an id of its own; a copy then parks a cached sequence for its id
rather than adopting, and so cutting back, another agent's conversation.

A stored prefix (the engine has a `prefix_store`: a long shared head's whole state, kept across
sessions and runs) is a third source: a prompt that starts with one, where no live or cached sequence
holds more, gets it restored (a RESTORE op; runtime.reuse.saved_states), and a prompt chunk that
reaches a long head not stored yet ends there, for the engine to store it.

Hybrid and recurrent models (the engine has `checkpoints`): a sequence's recurrent state is exact
only where it stands, so a match is cut back to where its source can resume (runtime.reuse.prefix_cache), and
prompt chunks end at checkpoint boundaries, where the engine keeps the state for later requests.

The planner also holds the releases the next plan carries: a sequence that is the source of a copy
in the plan going out is released only in the plan after it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, PrefixOp, PrefixOpKind
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.reuse.prefix_cache import (
    MIN_MATCH_TOKENS,
    CacheEntry,
    Match,
    PrefixCache,
    Resumption,
    as_tokens,
    common_prefix_len,
)
from swarm_panel.runtime.reuse.saved_states import StoredHeads, StoredPrefix
from swarm_panel.runtime.scheduling.lanes import KVBudget, Lane

log = logging.getLogger(__name__)

# The engine applies a plan's ops in order: finished sequences are cached, then parked (freeing their
# ids), and only then does a restore or a copy take an id (a copy from a sequence parked in the same
# plan comes from host RAM).
_OP_ORDER = {PrefixOpKind.CACHE: 0, PrefixOpKind.PARK: 1, PrefixOpKind.ADOPT: 2, PrefixOpKind.COPY: 2,
             PrefixOpKind.RESTORE: 2}


@dataclass(frozen=True)
class ChunkCut:
    """Where a prompt chunk ends and what the engine keeps around it (the Row's flags of the same names)."""

    end: int
    checkpoint: bool = False
    checkpoint_start: bool = False
    store_prefix: bool = False


class PrefixPlanner:
    def __init__(self, cache: PrefixCache, kv: KVBudget, caps: EngineCaps, config: SchedulerConfig) -> None:
        self.cache = cache
        self.kv = kv
        self.copies = caps.copies_prefixes
        self.max_sequences = caps.max_sequences
        self.consecutive_ids = caps.consecutive_ids
        self.parks = caps.parks_evicted and cache.max_parked > 0
        # None for attention models: any prefix of a sequence can be reused.
        self.resumption = Resumption(caps.checkpoints, caps.turn_end_tokens) if caps.checkpoints is not None else None
        self.stored = StoredHeads(caps.prefix_store, caps.turn_end_tokens) if caps.prefix_store is not None else None
        self.config = config
        # Cached sequences evicted (least recently used first) to make room for live ones.
        self.num_evictions = 0
        # CACHE ops wait here until a plan the engine will run; match ops go out with their rows.
        self._ops: list[PrefixOp] = []
        self._release: list[Request] = []

    @property
    def reuse_enabled(self) -> bool:
        return self.config.prefix_cache and self.cache.max_entries > 0

    @property
    def has_releases(self) -> bool:
        return bool(self._release)

    def take(self) -> tuple[list[Request], list[PrefixOp]]:
        """The releases and prefix ops for the plan going out; a copy's source stays until the next one."""
        sources = {op.source.request_id for op in self._ops if op.kind in (PrefixOpKind.ADOPT, PrefixOpKind.COPY)}
        release = [r for r in self._release if r.request_id not in sources]
        self._release = [r for r in self._release if r.request_id in sources]
        ops, self._ops = sorted(self._ops, key=lambda op: _OP_ORDER[op.kind]), []
        return release, ops

    def release(self, request: Request) -> None:
        """The engine drops this sequence in the next plan."""
        self._release.append(request)

    def keep(self, request: Request, padded: bool = False) -> None:
        """A finished request's sequence stays resident as a cached prefix where the cache takes it."""
        n = request.num_computed_tokens
        if padded and self.resumption is not None:
            # Padding rows moved the recurrent state past n: keep the sequence only up to a checkpoint.
            n = self.resumption.checkpoints.longest(as_tokens(request.token_ids), n)
        # At most one finished sequence per lane of width, as llama-server's slots each keep their last
        # prompt: llama.cpp attends over idle cells too (masked), so idle KV beyond that slows every step.
        for entry in self.cache.insert(request, n, limit=self.config.num_lanes):
            self._evict(entry)
        if self.cache.get(request) is None:
            self._release.append(request)
        else:
            self._ops.append(PrefixOp(PrefixOpKind.CACHE, request, None, n))

    # -- room --------------------------------------------------------------------------------------

    def evict_one(self, keep: CacheEntry | None = None) -> bool:
        """Frees the KV cells and the sequence id of a resident cached sequence but `keep`: the one whose
        agent is expected back furthest from now (runtime.reuse.prefix_cache)."""
        copying = {op.source.request_id for op in self._ops if op.kind is PrefixOpKind.COPY}
        entry = self.cache.pop_evictable(keep, spare=copying)
        if entry is None:
            return False
        self._evict(entry)
        return True

    def _evict(self, entry: CacheEntry) -> None:
        """An entry out of the resident cache waits in host RAM where the engine parks evicted
        sequences (a swarm larger than its lanes keeps every agent's conversation), else it goes."""
        self.num_evictions += 1
        if not self.parks:
            self._drop(entry)
            return
        self._ops.append(PrefixOp(PrefixOpKind.PARK, entry.handle, None, entry.num_tokens))
        for old in self.cache.add_parked(entry):
            self._drop(old)

    def make_room(self, tokens: int, keep: CacheEntry | None = None) -> bool:
        """Evicts cached sequences (`evict_one`) until `tokens` fit; says whether they do."""
        while self.kv.free_tokens < tokens:
            if not self.evict_one(keep):
                return False
        return True

    def make_sequence_room(self, lanes: Sequence[Lane], keep: CacheEntry | None = None) -> bool:
        """Evicts cached sequences (but `keep`) until the engine's pool of ids holds them and every
        started lane's; says whether it does.

        Called as a lane starts (its first chunk, after any adoption), so a lane that was admitted
        counting on an entry someone else took still finds an id.
        """
        pool = self._pool()
        if pool is None:
            return True
        while self._started(lanes) + self.cache.num_resident > pool:
            if not self.evict_one(keep):
                return False
        return True

    def _pool(self) -> int | None:
        if self.max_sequences is None:
            return None
        # Split KV runs a step as one ubatch only over consecutive sequence ids: holding live and
        # cached sequences within the width keeps the ids in use low and gap-free, as llama-server's slots.
        return min(self.max_sequences, self.config.num_lanes) if self.consecutive_ids else self.max_sequences

    @staticmethod
    def _started(lanes: Sequence[Lane]) -> int:
        return sum(lane.request is not None and (lane.prefix_checked or lane.padding) for lane in lanes)

    def _id_left_for_copy(self, lanes: Sequence[Lane]) -> bool:
        """Whether a lane can take an id of its own beside every cached sequence (a copy keeps its
        source; adopting frees it). Every occupied lane counts, started or not: one that starts later
        needs an id too, and the copy's source cannot be evicted for it in the same step."""
        pool = self._pool()
        occupied = sum(lane.request is not None for lane in lanes)
        return pool is None or not self.consecutive_ids or occupied < pool

    def drop_all(self) -> None:
        """Releases every cached sequence (live ones are untouched)."""
        for entry in self.cache.clear():
            self._drop(entry)

    def _drop(self, entry: CacheEntry) -> None:
        """Releases an entry no longer in the cache, cancelling its CACHE op if the engine has not seen it."""
        handle = entry.handle
        self._ops = [op for op in self._ops if not (op.kind is PrefixOpKind.CACHE and op.source is handle)]
        self._release.append(handle)

    # -- reuse -------------------------------------------------------------------------------------

    def adoptable(self, request: Request) -> CacheEntry | None:
        """The cached entry this request would adopt in place, if any."""
        if not self.reuse_enabled or not self.cache:
            return None
        tokens = as_tokens(request.token_ids)
        match = self._with_stored(tokens, request, self.cache.longest_match(tokens, request.num_tokens - 1,
                                                                              resume=self._resume_fn(tokens)))
        if match is None or not match.cached or not self._adopts(request, match.source, match.num_tokens):
            return None
        return match.source

    def waits_for_earlier(self, request: Request, computing: list[Request]) -> bool:
        """An earlier prompt computing in this very step will hold more of this one's prefix: wait for it."""
        if not computing or not self.copies:
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
        for entry in self.cache:
            shared = common_prefix_len(tokens, entry.tokens)
            best_held = max(best_held, resume(shared, entry.num_tokens) if shared else 0)
        stored = self._with_stored(tokens, request, None)
        if stored is not None:
            best_held = max(best_held, stored.num_tokens)
        return best_coming >= MIN_MATCH_TOKENS and best_coming > best_held

    def reusable(self, lane: Lane, lanes: Sequence[Lane]) -> int:
        """How many of the lane's prompt tokens `reuse` would find resident now; changes nothing."""
        match = self._longest_match(lane, lanes)
        return match.num_tokens if match is not None else 0

    def _longest_match(self, lane: Lane, lanes: Sequence[Lane]):
        request = lane.request
        live = [
            (other.request, as_tokens(other.request.token_ids[: other.request.num_computed_tokens]))
            for other in lanes
            if self.copies and other.request is not None and other is not lane
            and other.request.num_computed_tokens >= MIN_MATCH_TOKENS
            # A padding lane's recurrent state is past its last real token.
            and not (other.padding and self.resumption is not None)
        ]
        tokens = as_tokens(request.token_ids)
        match = self.cache.longest_match(tokens, request.num_tokens - 1, live, resume=self._resume_fn(tokens))
        return self._with_stored(tokens, request, match)

    def _with_stored(self, tokens, request: Request, match: Match | None) -> Match | None:
        """`match`, or a stored prefix where one holds more of the prompt (a live or cached sequence is
        cheaper to take from: it is already in the KV or a smaller copy)."""
        if self.stored is None:
            return match
        stored = self.stored.longest(tokens, request.num_tokens - 1, self._resume_fn(tokens))
        return stored if stored is not None and (match is None or stored.num_tokens > match.num_tokens) else match

    def reuse(self, lane: Lane, lanes: Sequence[Lane], planned: int) -> int:
        """Starts the lane's request at its longest resident prefix, with the op that puts it there;
        returns how many tokens it reuses."""
        request = lane.request
        match = self._longest_match(lane, lanes)
        if match is None:
            return 0
        n = match.num_tokens
        source = match.source
        if isinstance(source, StoredPrefix):
            return self._restore(request, source, n, planned)
        cached = isinstance(source, CacheEntry)
        adopt = cached and self._adopts(request, source, n)
        if self.parks and (not adopt or source.parked):
            # A copy, or a restore from host RAM, takes an id of the lane's own: other cached sequences
            # are parked for it, else the source itself, which the copy then comes from.
            if not self.make_sequence_room(lanes, keep=source if cached else None) and cached and not source.parked:
                self.cache.remove(source)
                self._evict(source)
        elif cached and not self._id_left_for_copy(lanes):
            adopt = True
        if adopt:
            self.cache.remove(source)
            op = PrefixOp(PrefixOpKind.ADOPT, source.handle, request, n)
        else:
            # A copy holds its own count of the shared tokens; skip it if even an empty cache has no room.
            keep = source if isinstance(source, CacheEntry) else None
            if not self.make_room(planned + n + 1, keep=keep):
                return 0
            if keep is not None:
                self.cache.touch(keep)
            handle = source.handle if isinstance(source, CacheEntry) else source
            op = PrefixOp(PrefixOpKind.COPY, handle, request, n)
        self._ops.append(op)
        self.kv.allocate(n - request.num_computed_tokens)
        request.num_computed_tokens = request.num_cached_tokens = n
        return n

    def _restore(self, request: Request, source: StoredPrefix, n: int, planned: int) -> int:
        """Starts the request from a stored prefix: its state restored into cells of the request's own."""
        if not self.make_room(planned + n + 1):
            return 0
        self._ops.append(PrefixOp(PrefixOpKind.RESTORE, source, request, n))
        self.kv.allocate(n - request.num_computed_tokens)
        request.num_computed_tokens = request.num_cached_tokens = n
        return n

    def recompute(self, request: Request, why: str) -> int:
        """The engine refused the op that gave this live request its prefix: it starts over from
        position 0. Returns the tokens that no longer count as reused."""
        log.warning("request %d recomputes its prompt: %s", request.request_id, why)
        reused = request.num_cached_tokens
        self.kv.free(request.num_computed_tokens)
        request.num_computed_tokens = request.num_cached_tokens = 0
        return reused

    def chunk_end(self, request: Request, start: int, end: int) -> ChunkCut:
        """Where a prompt chunk over [start, end) ends, and the checkpoints and stored prefix it leaves."""
        if not self.reuse_enabled:
            return ChunkCut(end)
        checkpoint = at_start = False
        if self.resumption is not None:
            end, checkpoint, at_start = self.resumption.chunk_end(request, start, end)
        head = self.stored.store_at(request, start, end) if self.stored is not None else None
        if head is None:
            return ChunkCut(end, checkpoint, at_start)
        # A hybrid's checkpoint at a later boundary waits for the next chunk.
        return ChunkCut(head, checkpoint and head == end, at_start, store_prefix=True)

    def _resume_fn(self, tokens):
        """resume(n, held) for PrefixCache.longest_match: None where any prefix can be reused."""
        if self.resumption is None:
            return None
        return lambda n, held: self.resumption.point(tokens, n, held)

    def _adopts(self, request: Request, entry: CacheEntry, n: int) -> bool:
        # Adopting drops the entry's tokens past n: fine when there are none, or when they are the
        # same agent's previous turn (its next turn is the only likely user). Otherwise copy, where
        # the engine can.
        return (not self.copies or n == entry.num_tokens
                or (entry.agent == request.agent and request.agent != "anonymous"))
