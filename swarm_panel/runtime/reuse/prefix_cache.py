"""Finished sequences kept for reuse, found again by the longest common token prefix; when each agent
is likely back (what they are evicted and parked by); and where a hybrid model's sequences can resume.

The scheduler owns one PrefixCache; the prefix planner (runtime.scheduling.prefix_planner) decides what goes
in and what comes out, and the KV budget (runtime.scheduling.lanes) reads its token count. Each entry
names a finished request (the handle the engine knows its sequence by) and the tokens that sequence
holds at positions 0..n-1. Entries are kept in least-recently-used order. Whenever live sequences need
the room, an entry a queued request would take its prefix from (its longest match, among the first
QUEUED_LOOKAHEAD queued) goes last; of the others, the one whose agent is expected back furthest from
now (`ReturnForecast`), the least recently used among equals (all of them, before any
gap is known).

Lookup is a vectorised scan: the new prompt is compared with every entry's tokens (and the live
sequences' computed tokens, which the planner passes in) with one numpy comparison each. With at
most a few hundred sequences of a few thousand tokens, that is a memcmp-speed pass of well under a
millisecond, done once per admitted request, and needs no per-token node objects as a trie would.

On a hybrid or recurrent model a sequence can resume only where its recurrent state is known (its
own end, or a checkpoint): the planner passes `resume`, which cuts each match back to such a point.

An entry is resident (its KV in the engine's cells, under a sequence id) or parked (in host RAM,
swarm_panel.runtime.reuse.saved_states): `max_entries` bounds the resident ones and `max_parked` the parked ones, and
only resident entries count in `num_tokens` and `num_resident`, what the KV budget and the id pool
read.

When each agent is likely back from its tool (ReturnForecast, below): what cached sequences are evicted and parked by.

Where a hybrid or recurrent model's sequences can resume, and where prompts leave checkpoints
(`Resumption`, below). A recurrent state is exact only at the position it has reached, so a sequence
holding `held` tokens can hand on a prefix of n tokens only when n == held, or when a checkpoint of
those n tokens exists (runtime.core.checkpoints). Checkpoints are made where later requests are likely
to resume:
- the end of a shared system prompt, so other agents start from it: the first end-of-turn token of a
  chat prompt (`<|im_end|>` after the system message), or what the caller marks in
  Request.checkpoint_positions (the bench's synthetic system prompt);
- the end of every later turn in the prompt, so a harness that re-renders or reorders its history
  (aider inserts the last exchange before its files) resumes at the last turn both prompts share
  rather than at the system prompt's end (a turn's end costs a step boundary and a state copy once:
  a checkpoint kept for the same tokens is not made again);
- the end of each prompt but its last token, so an exact repeat, or the next turn of a conversation
  whose re-rendered history differs from the tokens sampled, resumes there (a request's first sample
  needs one uncomputed prompt token, so a resume point is never the whole prompt).
A prompt chunk ends at the next such boundary and the engine snapshots the state after it; the last
prompt token then rides the next step beside the decode rows. That costs a request one step of
latency, so a prompt shorter than MIN_CHECKPOINT_TOKENS, cheap to recompute, gets no checkpoint at
its end. A cut costs more than the step, too: llama.cpp splits a hybrid's step into micro-batches
whose sequences all take the same number of tokens, so every short piece is one more pass over the
weights (runtime.scheduling.step.piece_tokens). So boundaries closer than NEAR_TOKENS make
no cut of their own, at the price of at most that many tokens recomputed by a request that resumes
there:
- the end of the prompt but its last token, when a turn ends at most NEAR_TOKENS before it (the
  generation prompt after the last message: Qwen3.5's is 11 tokens), is left to that turn's end;
- a boundary at most NEAR_TOKENS past a chunk's start (the end of the reply a follow-up turn resumes
  after) moves back to the start, where the state is at hand before the step: the engine snapshots it
  then (Row.checkpoint_start), before computing on.
The shared head's end (`head_ends`) is also where the engine keeps a stored prefix
(runtime.reuse.saved_states), on any model, where the head is long.
"""

from __future__ import annotations

import itertools
import statistics
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.core.request import Request

if TYPE_CHECKING:
    from swarm_panel.runtime.reuse.saved_states import StoredPrefix

# Shorter common prefixes are not worth a KV move (every prompt shares its BOS token).
MIN_MATCH_TOKENS = 8
# Queued requests whose best matches eviction spares: the ones admitted soonest (each costs, on the
# engine thread, one comparison per resident entry).
QUEUED_LOOKAHEAD = 16


def as_tokens(token_ids: list[int] | np.ndarray) -> np.ndarray:
    return np.asarray(token_ids, dtype=np.int64)


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


@dataclass(slots=True, eq=False)
class CacheEntry:
    # The finished request whose engine sequence holds this KV.
    handle: Request
    # Token ids at positions 0..len-1 of that sequence.
    tokens: np.ndarray
    agent: str
    # Parked in host RAM (runtime.reuse.saved_states): it holds no KV cells and no sequence id until reused.
    parked: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


@dataclass(slots=True)
class Match:
    # A CacheEntry, a live Request whose computed tokens match, or a stored prefix (runtime.reuse.saved_states).
    source: CacheEntry | Request | StoredPrefix
    num_tokens: int

    @property
    def cached(self) -> bool:
        return isinstance(self.source, CacheEntry)


class PrefixCache:
    def __init__(self, max_entries: int, max_parked: int = 0, forecast: ReturnForecast | None = None) -> None:
        # Resident entries at most, and parked ones beside them (an engine that parks evicted sequences).
        self.max_entries = max_entries
        self.max_parked = max_parked
        # None: evict least recently used first.
        self.forecast = forecast
        # The queued requests, first to be admitted first (the scheduler's queue); their best matches are
        # evicted last.
        self.queued: Callable[[], Iterable[Request]] = tuple
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()  # coldest first
        # What the resident entries hold of the KV (tokens) and of the engine's sequence ids.
        self.num_tokens = 0
        self.num_resident = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[CacheEntry]:
        return iter(self._entries.values())

    def get(self, handle: Request) -> CacheEntry | None:
        return self._entries.get(handle.request_id)

    def insert(self, handle: Request, num_tokens: int, limit: int | None = None) -> list[CacheEntry]:
        """Caches the first num_tokens of a finished request, resident; returns the resident entries
        evicted, coldest first, to stay within max_entries (and `limit`, where the caller holds fewer):
        the caller drops them or parks them (`add_parked`)."""
        evicted: list[CacheEntry] = []
        if self.max_entries < 1 or num_tokens < MIN_MATCH_TOKENS:
            return evicted
        cap = self.max_entries if limit is None else max(1, min(limit, self.max_entries))
        # In first, so that an older entry holding the same tokens is the one to go.
        entry = CacheEntry(handle, as_tokens(handle.token_ids[:num_tokens]), handle.agent)
        self._add(entry)
        while self.num_resident > cap:
            evicted.append(self.pop_evictable(keep=entry))
        return evicted

    def add_parked(self, entry: CacheEntry) -> list[CacheEntry]:
        """Keeps an evicted entry as parked; returns the parked entries beyond max_parked, which leave
        (the same choice as eviction's)."""
        entry.parked = True
        self._add(entry)
        over: list[CacheEntry] = []
        while self.num_parked > self.max_parked:
            victim = self._victim([e for e in self._entries.values() if e.parked])
            self.remove(victim)
            over.append(victim)
        return over

    @property
    def num_parked(self) -> int:
        return len(self._entries) - self.num_resident

    def _add(self, entry: CacheEntry) -> None:
        self._entries[entry.handle.request_id] = entry
        if not entry.parked:
            self.num_tokens += entry.num_tokens
            self.num_resident += 1

    def longest_match(self, tokens: np.ndarray, limit: int,
                      live: Iterable[tuple[Request, np.ndarray]] = (),
                      resume: Callable[[int, int], int] | None = None) -> Match | None:
        """The longest prefix of `tokens` (at most `limit`) held by a cached entry or a live sequence.

        `resume(n, held)` cuts a match of n tokens against a sequence holding `held` back to where that
        sequence can resume. Ties go to a cached entry (it can be adopted in place), then to the most
        recently used one.
        """
        def matched(held: np.ndarray) -> int:
            n = min(common_prefix_len(tokens, held), limit)
            return n if resume is None or n < MIN_MATCH_TOKENS else resume(n, len(held))

        best: Match | None = None
        for request, held in live:
            n = matched(held)
            if n >= MIN_MATCH_TOKENS and (best is None or n > best.num_tokens):
                best = Match(request, n)
        for entry in reversed(self._entries.values()):
            n = matched(entry.tokens)
            if n >= MIN_MATCH_TOKENS and (best is None or n > best.num_tokens or
                                          (n == best.num_tokens and not best.cached)):
                best = Match(entry, n)
        return best

    def touch(self, entry: CacheEntry) -> None:
        self._entries.move_to_end(entry.handle.request_id)

    def discard(self, request_id: int) -> CacheEntry | None:
        """Forgets the entry of this finished request, if any (its engine sequence is already gone)."""
        entry = self._entries.get(request_id)
        if entry is not None:
            self.remove(entry)
        return entry

    def remove(self, entry: CacheEntry) -> None:
        del self._entries[entry.handle.request_id]
        if not entry.parked:
            self.num_tokens -= entry.num_tokens
            self.num_resident -= 1

    def pop_evictable(self, keep: CacheEntry | None = None, spare: Collection[int] = ()) -> CacheEntry | None:
        """Removes and returns the resident entry to evict other than `keep`; None when there is none
        (a parked entry holds nothing of the engine's to free). Entries of the requests in `spare` go
        only when no other is left (the source of a copy in the plan going out keeps its id until the
        next one whatever happens to it)."""
        resident = [entry for entry in self._entries.values() if not entry.parked]
        candidates = [entry for entry in resident if entry is not keep]
        if not candidates:
            return None
        candidates = [e for e in candidates if e.handle.request_id not in spare] or candidates
        wanted = self._wanted(resident)
        entry = self._victim([e for e in candidates if id(e) not in wanted] or candidates)
        self.remove(entry)
        return entry

    def _wanted(self, entries: list[CacheEntry]) -> set[int]:
        """The entries (by id()) one of the first queued requests would take its longest prefix from: of
        several holding as much, the most recently used (the others hold nothing it needs)."""
        wanted: set[int] = set()
        longest = max((entry.num_tokens for entry in entries), default=0)
        for request in itertools.islice(self.queued(), QUEUED_LOOKAHEAD):
            tokens = as_tokens(request.token_ids[:longest])
            shared = [common_prefix_len(tokens, entry.tokens) for entry in entries]
            best = max(shared, default=0)
            if best >= MIN_MATCH_TOKENS:
                wanted.add(id(entries[len(shared) - 1 - shared[::-1].index(best)]))
        return wanted

    def _victim(self, entries: list[CacheEntry]) -> CacheEntry:
        """Of entries in least-recently-used order: the one whose agent is expected back furthest from
        now, the least recently used among equals."""
        forecast = self.forecast
        if forecast is None:
            return entries[0]
        return max(entries, key=lambda e: forecast.distance(e.agent, e.handle.finished_time, forecast.now))

    def clear(self) -> list[CacheEntry]:
        entries = list(self._entries.values())
        self._entries.clear()
        self.num_tokens = self.num_resident = 0
        return entries


# Each new gap moves an agent's forecast halfway: a harness's tool times vary turn to turn.
GAP_WEIGHT = 0.5
# Agents remembered at most (the oldest go first); a long-running server meets many sessions.
MAX_AGENTS = 4096


class ReturnForecast:
    def __init__(self) -> None:
        # The scheduler's time at its latest call, which eviction measures distances from.
        self.now = 0.0
        self._gap: dict[str, float] = {}
        # When each agent with no request in the scheduler last had one.
        self._idle_since: dict[str, float] = {}

    def arrived(self, agent: str, now: float) -> None:
        """A request of this agent entered the scheduler."""
        self.now = now
        since = self._idle_since.pop(agent, None)
        if since is None:
            return
        gap = max(now - since, 0.0)
        previous = self._gap.pop(agent, None)
        self._gap[agent] = gap if previous is None else previous + GAP_WEIGHT * (gap - previous)
        if len(self._gap) > MAX_AGENTS:
            del self._gap[next(iter(self._gap))]

    def idle(self, agent: str, now: float) -> None:
        """The agent's last request in the scheduler left it (runtime.policies.policy.AgentService counts them)."""
        self.now = now
        self._idle_since[agent] = now
        if len(self._idle_since) > MAX_AGENTS:
            del self._idle_since[next(iter(self._idle_since))]

    def gap(self, agent: str) -> float:
        """The agent's forecast idle gap: its own, else the median of the others', else 0."""
        own = self._gap.get(agent)
        if own is not None:
            return own
        return statistics.median(self._gap.values()) if self._gap else 0.0

    def distance(self, agent: str, finished: float | None, now: float) -> float:
        """How far from now the agent of a sequence that finished at `finished` is expected back; the
        larger, the better to evict."""
        expected = (finished if finished is not None else now) + self.gap(agent)
        return abs(expected - now)


# ----- where a hybrid's sequences resume -----

MIN_CHECKPOINT_TOKENS = 64
NEAR_TOKENS = 16


def turn_end_array(turn_end_tokens: frozenset[int]) -> np.ndarray:
    return np.fromiter(turn_end_tokens, dtype=np.int64)


def head_ends(request: Request, turn_ends: np.ndarray) -> list[int]:
    """Where the prompt's shared head ends, sorted: the first end-of-turn token (the system message's),
    and the positions the caller marked. Other requests are likely to start with those tokens."""
    prompt = request.num_prompt_tokens
    marked = {p for p in request.checkpoint_positions if MIN_MATCH_TOKENS <= p < prompt}
    if len(turn_ends):
        ends = np.flatnonzero(np.isin(as_tokens(request.token_ids[:prompt]), turn_ends))
        if len(ends) and MIN_MATCH_TOKENS <= ends[0] + 1 < prompt:
            marked.add(int(ends[0]) + 1)
    return sorted(marked)


class Resumption:
    def __init__(self, checkpoints: CheckpointStore, turn_end_tokens: frozenset[int] = frozenset()) -> None:
        self.checkpoints = checkpoints
        self._turn_ends = turn_end_array(turn_end_tokens)

    def point(self, tokens: np.ndarray, n: int, held: int) -> int:
        """A match of n tokens against a sequence holding `held`, cut back to where it can resume."""
        return n if n == held else self.checkpoints.longest(tokens, n)

    def boundaries(self, request: Request) -> list[int]:
        prompt = request.num_prompt_tokens
        marked = set(head_ends(request, self._turn_ends))
        if len(self._turn_ends):
            ends = np.flatnonzero(np.isin(as_tokens(request.token_ids[:prompt]), self._turn_ends)) + 1
            marked.update(int(end) for end in ends if MIN_MATCH_TOKENS <= end < prompt)
        last = prompt - 1
        if last >= MIN_CHECKPOINT_TOKENS and not any(last - NEAR_TOKENS <= b < last for b in marked):
            marked.add(last)
        return sorted(marked)

    def chunk_end(self, request: Request, start: int, end: int) -> tuple[int, bool, bool]:
        """Where a prompt chunk over [start, end) should end, whether a checkpoint follows it, and whether
        one is taken at its start instead of a boundary just past it."""
        tokens = None
        at_start = False
        heads = None
        for boundary in self.boundaries(request):
            if start < boundary <= end:
                tokens = as_tokens(request.token_ids) if tokens is None else tokens
                if self.checkpoints.has(tokens[:boundary]):
                    continue
                if boundary - start <= NEAR_TOKENS and start >= MIN_MATCH_TOKENS:
                    # Other agents resume exactly at a shared head's end: that cut stays.
                    heads = head_ends(request, self._turn_ends) if heads is None else heads
                    if boundary not in heads:
                        at_start = at_start or not self.checkpoints.has(tokens[:start])
                        continue
                return boundary, True, at_start
        return end, False, at_start
