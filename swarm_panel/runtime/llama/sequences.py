"""Which llama.cpp sequence holds what between steps: each live request's lane (its sequence id and
sampler), finished requests' sequences kept for reuse (resident in KV cells, or parked in host RAM),
and the ids free for either. Prefix ops move KV between them (runtime.llama.prefix_ops).

Under split KV each id is its own stream, and live and cached sequences share the max_lanes ids, so
the scheduler evicts a cached one before a new lane needs its id (EngineCaps.max_sequences).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import llama_cpp

from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.context import LlamaContext
from swarm_panel.runtime.llama.sampling import BackendGreedySampler, ChainSampler, GreedySampler
from swarm_panel.runtime.reuse.parked import ParkedSequences


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
