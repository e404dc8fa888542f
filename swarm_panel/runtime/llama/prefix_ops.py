"""The scheduler's prefix ops on the llama engine's sequences (runtime.core.engine.PrefixOp).

Unified KV: moving KV between ids (llama_memory_seq_cp then seq_rm) only relabels cells, so caching,
adopting and copying a prefix cost a scan of the cell metadata, never a recomputation. Split KV:
llama.cpp copies between streams only whole streams. A finished sequence stays cached in its own
stream, and a request that adopts it takes over that stream (trimmed to the shared prefix), as
llama-server's slots keep their last prompt; a copy takes the source's state through host RAM
(`SequenceMemory.copy_across`).

Hybrid and recurrent models hold one recurrent state per sequence that cannot be cut back or copied
in part: runtime.llama.memory does every move by model kind. Stored prefixes (runtime.reuse.stored)
are restored by RESTORE ops.
"""

from __future__ import annotations

import heapq
import logging

from swarm_panel.runtime.core.engine import PrefixOp, PrefixOpKind
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.llama.memory import MemoryRefused
from swarm_panel.runtime.llama.sequences import Lane, Sequences
from swarm_panel.runtime.reuse.parked import ParkedSequence
from swarm_panel.runtime.reuse.stored import PrefixKeeper, StoredPrefixGone

log = logging.getLogger(__name__)


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
