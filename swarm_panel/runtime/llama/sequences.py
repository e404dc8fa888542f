"""Which llama.cpp sequence holds what between steps, and the scheduler's prefix ops that move KV
between them (runtime.core.engine.PrefixOp).

Each live request's lane (its sequence id and sampler), finished requests' sequences kept for reuse
(resident in KV cells, or parked in host RAM), and the ids free for either (`Sequences`). Under split
KV each id is its own stream, and live and cached sequences share the max_lanes ids, so the scheduler
evicts a cached one before a new lane needs its id (EngineCaps.max_sequences).

The prefix ops (`PrefixOps`, below). Unified KV: moving KV between ids (llama_memory_seq_cp then
seq_rm) only relabels cells, so caching, adopting and copying a prefix cost a scan of the cell
metadata, never a recomputation. Split KV: llama.cpp copies between streams only whole streams. A
finished sequence stays cached in its own stream, and a request that adopts it takes over that stream
(trimmed to the shared prefix), as llama-server's slots keep their last prompt; a copy takes the
source's state through host RAM (`SequenceMemory.copy_across`).

Hybrid and recurrent models hold one recurrent state per sequence that cannot be cut back or copied
in part: runtime.llama.context's SequenceMemory does every move by model kind. Stored prefixes
(runtime.reuse.saved_states) are restored by RESTORE ops.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

import llama_cpp

from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.context import LlamaContext, MemoryRefused
from swarm_panel.runtime.llama.sampling import BackendGreedySampler, ChainSampler, GreedySampler
from swarm_panel.runtime.reuse.saved_states import ParkedSequence, ParkedSequences, PrefixKeeper, StoredPrefixGone

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Lane:
    """A live request's llama.cpp sequence and its sampler (made on first sight)."""

    seq_id: int
    sampler: GreedySampler | ChainSampler | BackendGreedySampler | None = None
    # Leading tokens whose KV cells it shares with another sequence (a unified-KV prefix copy).
    shared: int = 0
    # The sampler's chain is attached to the context (llama_set_sampler): it runs inside the graph.
    on_backend: bool = False


class Sequences:
    """The sequences of one context; a relayout starts a new one, every sequence dropped."""

    def __init__(self, context: LlamaContext, parked: ParkedSequences, park_cached: bool) -> None:
        layout = context.layout
        self.context = context
        self.memory = context.memory
        self.kv_unified = layout.kv_unified
        self.max_lanes = layout.max_lanes
        self.cache_slots = layout.cache_slots
        # Finished sequences wait in host RAM: under unified KV as they finish, under split KV once the
        # scheduler evicts them from their streams.
        self.parks_cached = layout.kv_unified and park_cached
        self.parks_evicted = not layout.kv_unified and park_cached
        self.parked = parked
        self.lanes: dict[int, Lane] = {}
        # request_id of a finished request -> the sequence id holding its prefix.
        self.cached: dict[int, int] = {}
        # cache seq id -> leading tokens whose cells it shares with another sequence.
        self.cache_shared: dict[int, int] = {}
        self.free_seq_ids = list(range(layout.max_lanes))
        first = layout.max_lanes
        self.free_cache_ids = list(range(first, first + layout.cache_slots)) if layout.kv_unified else []

    def lane_for(self, request: Request) -> Lane:
        lane = self.lanes.get(request.request_id)
        if lane is None:
            if not self.free_seq_ids:
                raise ValueError(f"no free lane: all {self.max_lanes} sequences are in use")
            lane = self.lanes[request.request_id] = Lane(heapq.heappop(self.free_seq_ids))
        return lane

    def unlane(self, request: Request, lane: Lane) -> None:
        """Gives back a lane just taken for a request whose KV could not be put in it."""
        del self.lanes[request.request_id]
        heapq.heappush(self.free_seq_ids, lane.seq_id)

    def release(self, request: Request) -> None:
        self.parked.pop(request.request_id)
        cache_id = self.cached.pop(request.request_id, None)
        if cache_id is not None:
            self.free_cached_id(cache_id)
        lane = self.lanes.pop(request.request_id, None)
        if lane is None:
            return
        self.memory.drop(lane.seq_id)
        self.close_sampler(lane)
        heapq.heappush(self.free_seq_ids, lane.seq_id)

    def free_cached_id(self, seq_id: int) -> None:
        self.cache_shared.pop(seq_id, None)
        self.memory.drop(seq_id)
        heapq.heappush(self.free_cache_ids if self.kv_unified else self.free_seq_ids, seq_id)

    def close_sampler(self, lane: Lane) -> None:
        if lane.on_backend:
            # Detached before it is freed: the context keeps the pointer.
            llama_cpp.llama_set_sampler(self.context.ptr, lane.seq_id, None)
            lane.on_backend = False
        if lane.sampler is not None:
            lane.sampler.close()
            lane.sampler = None

    def drop_all(self) -> None:
        for lane in self.lanes.values():
            self.close_sampler(lane)
        self.lanes.clear()
        self.cached.clear()
        self.parked.clear()
        self.cache_shared.clear()

    def lane_kv_positions(self) -> list[int]:
        """Highest KV position each lane sequence id holds (-1: empty, or held by a cached sequence)."""
        cached = set(self.cached.values())
        return [-1 if seq_id in cached else llama_cpp.llama_memory_seq_pos_max(self.context.mem, seq_id)
                for seq_id in range(self.max_lanes)]

    def cached_kv_positions(self) -> list[int]:
        """Highest KV position of each cached sequence, resident ones first, then parked ones (-1: empty)."""
        if self.kv_unified:
            ids = range(self.max_lanes, self.max_lanes + self.cache_slots)
        else:
            ids = sorted(self.cached.values())
        positions = [llama_cpp.llama_memory_seq_pos_max(self.context.mem, seq_id) for seq_id in ids]
        if self.parked:
            positions = [p for p in positions if p >= 0] + [n - 1 for n in self.parked.lengths()]
        return positions + [-1] * (self.cache_slots - len(positions))


# ----- the prefix ops -----


class PrefixOps:
    def __init__(self, seqs: Sequences, keeper: PrefixKeeper | None) -> None:
        self.seqs = seqs
        self.memory = seqs.memory
        self.keeper = keeper
        self.store = seqs.context.prefix_store

    def apply(self, op: PrefixOp, errors: dict[int, str], refused: dict[int, str]) -> None:
        """Moves KV between sequences. A malformed op fails its destination; one the memory cannot do
        is refused (the destination recomputes), never applied halfway; neither fails the step."""
        if op.kind is PrefixOpKind.CACHE:
            self._cache_sequence(op, refused)
        elif op.kind is PrefixOpKind.PARK:
            self._park_evicted(op, refused)
        elif op.kind is PrefixOpKind.RESTORE:
            self._restore_stored(op, errors, refused)
        else:
            self._share(op, errors, refused)

    def _share(self, op: PrefixOp, errors: dict[int, str], refused: dict[int, str]) -> None:
        """ADOPT and COPY: dest starts from the first num_tokens of a live, cached or parked sequence."""
        seqs, memory = self.seqs, self.memory
        dest, n, source_id = op.dest, op.num_tokens, None
        try:
            if dest.request_id in seqs.lanes:
                raise ValueError("the destination of a prefix op already has a sequence")
            if op.source.request_id in seqs.parked:
                self._unpark(op)
                return
            if op.kind is PrefixOpKind.ADOPT:
                source_id = seqs.cached.pop(op.source.request_id, None)
            else:
                source_lane = seqs.lanes.get(op.source.request_id)
                source_id = source_lane.seq_id if source_lane else seqs.cached.get(op.source.request_id)
            if source_id is None and op.source.request_id in refused:
                # Parked, then pushed out of the park budget by a park earlier in this plan.
                raise MemoryRefused(f"the prefix source (request {op.source.request_id}) left host RAM")
            if source_id is None:
                raise ValueError(f"the prefix source (request {op.source.request_id}) holds no KV here")
            held = memory.held(source_id)
            if not 0 < n <= held:
                raise ValueError(f"a prefix of {n} tokens was asked of a sequence holding {held}")
            if not seqs.kv_unified and op.kind is PrefixOpKind.ADOPT:
                # dest takes over the cached stream, cut back to the shared prefix.
                memory.trim(source_id, n, dest.token_ids)
                seqs.lanes[dest.request_id] = Lane(source_id)
                source_id = None
                return
            lane = seqs.lane_for(dest)
            try:
                if seqs.kv_unified:
                    memory.copy(source_id, lane.seq_id, n, dest.token_ids)
                else:
                    memory.copy_across(source_id, lane.seq_id, n, dest.token_ids)
            except MemoryRefused:
                seqs.unlane(dest, lane)
                raise
            if seqs.kv_unified:
                self._note_sharing(op, source_id, lane, n)
        except ValueError as exc:
            errors[dest.request_id] = str(exc)
        except MemoryRefused as exc:
            refused[dest.request_id] = str(exc)
        finally:
            if op.kind is PrefixOpKind.ADOPT:
                # A parked state is consumed either way too.
                seqs.parked.pop(op.source.request_id)
            if op.kind is PrefixOpKind.ADOPT and source_id is not None:
                # The cached sequence is consumed either way: its cells now belong to dest or nobody.
                seqs.free_cached_id(source_id)

    def _note_sharing(self, op: PrefixOp, source_id: int, lane: Lane, n: int) -> None:
        """After a unified copy of n tokens (seq_cp shares cells, it copies none): what dest shares."""
        seqs = self.seqs
        if op.kind is PrefixOpKind.ADOPT:
            # The cached sequence goes; dest keeps sharing only what it shared with others.
            lane.shared = min(n, seqs.cache_shared.get(source_id, 0))
            return
        lane.shared = n
        source_lane = seqs.lanes.get(op.source.request_id)
        if source_lane is not None:
            source_lane.shared = max(source_lane.shared, n)
        else:
            seqs.cache_shared[source_id] = max(seqs.cache_shared.get(source_id, 0), n)

    def _unpark(self, op: PrefixOp) -> None:
        """Gives dest the first num_tokens of a parked sequence: its state restored, then cut back."""
        parked, n = self.seqs.parked.get(op.source.request_id), op.num_tokens
        if not 0 < n <= parked.num_tokens:
            raise ValueError(f"a prefix of {n} tokens was asked of a sequence holding {parked.num_tokens}")
        self._load_state(op.dest, parked.data, parked.num_tokens, n)

    def _restore_stored(self, op: PrefixOp, errors: dict[int, str], refused: dict[int, str]) -> None:
        """Gives dest the first num_tokens of a stored prefix (read back from disk if not in RAM); the
        stored prefix stays. One that cannot be restored is refused: dest recomputes."""
        dest = op.dest
        try:
            if dest.request_id in self.seqs.lanes:
                raise ValueError("the destination of a prefix op already has a sequence")
            if self.keeper is None or self.store is None:
                raise MemoryRefused("this engine keeps no stored prefixes")
            entry = op.source
            self._load_state(dest, self.keeper.state(entry, dest.token_ids, op.num_tokens),
                             entry.num_tokens, op.num_tokens)
            self.store.num_restored += 1
        except ValueError as exc:
            errors[dest.request_id] = str(exc)
        except (MemoryRefused, StoredPrefixGone) as exc:
            log.warning("request %d does not start from a stored prefix: %s", dest.request_id, exc)
            refused[dest.request_id] = str(exc)

    def _load_state(self, dest: Request, data, held: int, n: int) -> None:
        """Restores a saved state of `held` tokens into dest's new sequence and cuts it back to n."""
        lane = self.seqs.lane_for(dest)
        try:
            self.memory.load(lane.seq_id, data, held)
            if n < held:
                try:
                    self.memory.trim(lane.seq_id, n, dest.token_ids)
                except MemoryRefused:
                    self.memory.drop(lane.seq_id)
                    raise
        except MemoryRefused:
            self.seqs.unlane(dest, lane)
            raise

    def _park(self, seq_id: int, rid: int, n: int, tokens: list[int]) -> None:
        parked = self.seqs.parked
        self.memory.trim(seq_id, n, tokens)
        data = self.memory.save(seq_id)
        if not parked.fits(len(data)):
            raise MemoryRefused(f"parking {len(data)} bytes would pass the park budget of "
                                f"{parked.budget_bytes} bytes")
        parked.put(rid, ParkedSequence(data, n))

    def _park_evicted(self, op: PrefixOp, refused: dict[int, str]) -> None:
        """A cached sequence leaves its stream for host RAM, its id free for a live lane; the oldest
        parked states make way past the budget, and the scheduler hears of each that went (refused)."""
        seqs, parked = self.seqs, self.seqs.parked
        rid = op.source.request_id
        seq_id = seqs.cached.pop(rid, None)
        if seq_id is None:
            # Released in this very plan.
            return
        try:
            data = self.memory.save(seq_id)
            if len(data) > parked.budget_bytes:
                raise MemoryRefused(f"{len(data)} bytes are more than the park budget of "
                                    f"{parked.budget_bytes} bytes")
            while not parked.fits(len(data)):
                oldest = parked.oldest()
                parked.pop(oldest)
                refused[oldest] = "parked sequences over the park budget: the oldest went"
            parked.put(rid, ParkedSequence(data, op.num_tokens))
        except MemoryRefused as exc:
            log.info("request %d's sequence is not parked: %s", rid, exc)
            refused[rid] = str(exc)
        finally:
            seqs.free_cached_id(seq_id)

    def _cache_sequence(self, op: PrefixOp, refused: dict[int, str]) -> None:
        """A finished request's sequence stays resident, cut to op.num_tokens, or is freed if it cannot be."""
        seqs, memory = self.seqs, self.memory
        rid, n = op.source.request_id, op.num_tokens
        lane = seqs.lanes.pop(rid, None)
        if lane is None:
            return
        seqs.close_sampler(lane)
        try:
            if not seqs.kv_unified and n > 0:
                # The lane's own stream becomes the cached sequence: nothing moves.
                memory.trim(lane.seq_id, n, op.source.token_ids)
                seqs.cached[rid] = lane.seq_id
                return
            shared = min(lane.shared, n)
            # Parking frees only cells no other sequence holds, and a restore copies every cell back:
            # a sequence that mostly shares (agents on one long system prompt) stays resident.
            if seqs.parks_cached and n > 0 and n - shared >= shared:
                self._park(lane.seq_id, rid, n, op.source.token_ids)
            elif seqs.free_cache_ids and n > 0:
                cache_id = heapq.heappop(seqs.free_cache_ids)
                try:
                    memory.copy(lane.seq_id, cache_id, n, op.source.token_ids)
                except MemoryRefused:
                    heapq.heappush(seqs.free_cache_ids, cache_id)
                    raise
                seqs.cached[rid] = cache_id
                seqs.cache_shared[cache_id] = shared
        except MemoryRefused as exc:
            log.warning("request %d's sequence is not kept for reuse: %s", rid, exc)
            refused[rid] = str(exc)
        if seqs.cached.get(rid) != lane.seq_id:
            memory.drop(lane.seq_id)
            heapq.heappush(seqs.free_seq_ids, lane.seq_id)
