"""What the engine core publishes for other threads: after every step, the scheduler's state as one
immutable EngineSnapshot (lanes and counters), rolling figures from the per-step records:
throughput, utilization, latency, per agent; and where the engine thread's time goes (`StepAccount`).

Written by the engine thread, read by anyone. The lock guards only appends and copies: a reader
copies what it needs under it and sorts and sums outside, so a panel tick or a scrape never holds
the engine thread up for longer than a copy.

The step account, step by step: the device's compute, sampling, the thread's own host work, time it
was ready to run but not running (the GIL held by another thread, or no free core), and idle time with
nothing to compute. The parts add up to the thread's wall time.

The engine reports the first two in its StepResult; the loop that drives it times the whole step in
wall and thread-CPU seconds, so host work is what is left, and its wall seconds without CPU are the wait.
On a card, every second the device waits for the host is lost; on a CPU, the host's share is the
ceiling of what overlapping them could give back.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.engine import EngineCaps, StepResult
from swarm_panel.runtime.core.fit import StepLine, fit_step_line, width_medians
from swarm_panel.runtime.core.stats import StepStats

if TYPE_CHECKING:
    from swarm_panel.runtime.scheduling.scheduler import Scheduler

log = logging.getLogger(__name__)

@dataclass(slots=True, frozen=True)
class LaneView:
    index: int
    state: str  # "idle", "prefill", "decode" or "padding"
    request_id: int | None = None
    agent: str | None = None
    prompt_tokens: int = 0
    computed_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True, frozen=True)
class EngineSnapshot:
    """What the scheduler held at the end of a step, published whole: readers never see half a step."""

    step: int
    lanes: tuple[LaneView, ...]
    waiting: int
    running: int
    kv_budget: int
    time: float  # clock time it was taken: the engine thread publishes at least every IDLE_POLL_S
    # What the engine holds and can do now: a widening or narrowing changes it between steps.
    caps: EngineCaps


def snapshot_of(s: Scheduler, now: float) -> EngineSnapshot:
    views = []
    for lane in s.lanes:
        request = lane.request
        if request is None:
            views.append(LaneView(lane.index, "idle"))
            continue
        state = "padding" if lane.padding else "decode" if request.is_decoding else "prefill"
        views.append(LaneView(lane.index, state, request.request_id, request.agent, request.num_prompt_tokens,
                              request.num_computed_tokens, request.num_output_tokens))
    running = sum(view.state in ("prefill", "decode") for view in views)
    return EngineSnapshot(s.num_steps, tuple(views), len(s.waiting), running, s.kv_budget, now, s.caps)


LATENCY_SAMPLES = 4096
AGENT_LATENCY_SAMPLES = 512


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile, q in 0..100; None for no data."""
    return _ranked(sorted(values), q)


def _ranked(ordered: Sequence[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


@dataclass(slots=True)
class AgentFigures:
    agent: str
    requests: int = 0
    tokens: int = 0
    tok_s: float = 0.0
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    # Prompt tokens this agent's requests looked up in the prefix cache, and how many were reused.
    prefix_queries: int = 0
    prefix_hits: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


@dataclass(slots=True)
class MetricsSnapshot:
    time: float = 0.0
    steps: int = 0
    policy: str = ""
    num_lanes: int = 0
    tok_s: float = 0.0
    padding_tok_s: float = 0.0
    utilization: float = 0.0
    padding_share: float = 0.0
    occupancy: float = 0.0
    requests_s: float = 0.0
    step_rate: float = 0.0
    mean_step_ms: float = 0.0
    width_held: int = 0
    live_lanes: int = 0
    padding_lanes: int = 0
    queue_depth: int = 0
    kv_used: int = 0
    kv_capacity: int = 0
    # Idle KV of finished sequences kept for prefix reuse (beside kv_used, within kv_capacity).
    kv_cached: int = 0
    cached_sequences: int = 0
    # A hybrid model's recurrent-state checkpoints, in a memory budget of their own (0 for attention models).
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    # Finished sequences parked in host RAM instead of KV cells.
    parked_sequences: int = 0
    parked_bytes: int = 0
    # Totals since reset, as vLLM names them: prompt tokens looked up, and tokens served from cache.
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    # Hit rate over the rolling window (tokens reused / tokens looked up).
    prefix_window_hit_rate: float = 0.0
    total_tokens: int = 0
    total_requests: int = 0
    total_prefill_tokens: int = 0
    total_padding_rows: int = 0
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    e2e_p50: float | None = None
    e2e_p95: float | None = None
    step_line: StepLine | None = None
    # Median decode-only step ms per width seen often enough: B/t(B) at the width that runs, unfitted.
    step_ms_by_width: dict[int, float] = field(default_factory=dict)
    agents: list[AgentFigures] = field(default_factory=list)

    @property
    def kv_pct(self) -> float:
        return 100.0 * self.kv_used / self.kv_capacity if self.kv_capacity else 0.0

    @property
    def kv_cached_pct(self) -> float:
        return 100.0 * self.kv_cached / self.kv_capacity if self.kv_capacity else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


class _Latencies:
    def __init__(self, maxlen: int) -> None:
        self.ttft: deque[float] = deque(maxlen=maxlen)
        self.itl: deque[float] = deque(maxlen=maxlen)
        self.e2e: deque[float] = deque(maxlen=maxlen)

    def copy(self) -> tuple[list[float], list[float], list[float]]:
        return list(self.ttft), list(self.itl), list(self.e2e)


class MetricsAggregator:
    def __init__(self, window_s: float = 5.0, history: int = 2048) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._window: deque[StepStats] = deque()
        self._history: deque[StepStats] = deque(maxlen=history)
        self._fit_points: deque[tuple[int, float]] = deque(maxlen=4096)
        # When set (a live engine), rates decay over idle time and the window forgets old steps.
        self.clock: Callable[[], float] | None = None
        # Told every step record after it is counted here (on the engine thread), e.g. /metrics' histograms.
        self._listeners: tuple[Callable[[StepStats], None], ...] = ()
        self.reset()

    def subscribe(self, listener: Callable[[StepStats], None]) -> None:
        """Calls listener(stats) for every step observed from now on; it must be quick (engine thread)."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def reset(self) -> None:
        with self._lock:
            self._window.clear()
            self._history.clear()
            self._fit_points.clear()
            self._all = _Latencies(LATENCY_SAMPLES)
            self._agents: dict[str, _Latencies] = {}
            self._agent_requests: Counter[str] = Counter()
            self._agent_tokens: Counter[str] = Counter()
            self._agent_prefix_queries: Counter[str] = Counter()
            self._agent_prefix_hits: Counter[str] = Counter()
            self._totals = Counter()
            self._idle_state: tuple[int, int, int, int] | None = None

    def note_idle(self, kv_used: int, kv_cached: int, kv_capacity: int, queue_depth: int) -> None:
        """The engine ran no step: what it holds now, since no step record will say so."""
        with self._lock:
            self._idle_state = (kv_used, kv_cached, kv_capacity, queue_depth)

    def observe(self, stats: StepStats) -> None:
        with self._lock:
            self._idle_state = None
            self._window.append(stats)
            self._history.append(stats)
            while self._window and self._window[0].time < stats.time - self.window_s:
                self._window.popleft()
            if stats.prefill_tokens == 0:
                self._fit_points.append((stats.decode_rows + stats.padding_lanes, stats.duration * 1e3))
            self._totals.update(
                steps=1,
                tokens=stats.useful_tokens,
                requests=len(stats.e2e),
                prefill=stats.prefill_tokens,
                padding=stats.padding_lanes,
                prefix_queries=stats.prefix_queries,
                prefix_hits=stats.prefix_hits,
            )
            for agent, queried, reused in stats.prefix_agents:
                self._agent_prefix_queries[agent] += queried
                self._agent_prefix_hits[agent] += reused
            for kind, samples in (("ttft", stats.ttft), ("itl", stats.itl), ("e2e", stats.e2e)):
                for agent, seconds in samples:
                    getattr(self._all, kind).append(seconds)
                    lat = self._agents.get(agent)
                    if lat is None:
                        lat = self._agents[agent] = _Latencies(AGENT_LATENCY_SAMPLES)
                    getattr(lat, kind).append(seconds)
            for agent, _ in stats.ttft:
                self._agent_tokens[agent] += 1
            for agent, _ in stats.itl:
                self._agent_tokens[agent] += 1
            for agent, _ in stats.e2e:
                self._agent_requests[agent] += 1
            listeners = self._listeners
        for listener in listeners:
            try:
                listener(stats)
            except Exception:  # a broken listener must not fail the step, and with it every request
                log.exception("a metrics listener failed")

    def recent_steps(self, n: int | None = None) -> list[StepStats]:
        with self._lock:
            steps = list(self._history)
        return steps if n is None else steps[-n:]

    def snapshot(self) -> MetricsSnapshot:
        now = self.clock() if self.clock is not None else None
        with self._lock:
            window = [s for s in self._window if now is None or s.time >= now - self.window_s]
            idle_state = self._idle_state
            totals = Counter(self._totals)
            overall = self._all.copy()
            per_agent = {agent: lat.copy() for agent, lat in self._agents.items()}
            requests, tokens = Counter(self._agent_requests), Counter(self._agent_tokens)
            prefix_queries, prefix_hits = dict(self._agent_prefix_queries), dict(self._agent_prefix_hits)
            points = list(self._fit_points)
        ttft, itl, e2e = (_p50_p95(values) for values in overall)
        snap = MetricsSnapshot(
            total_tokens=totals["tokens"],
            total_requests=totals["requests"],
            total_prefill_tokens=totals["prefill"],
            total_padding_rows=totals["padding"],
            prefix_cache_queries=totals["prefix_queries"],
            prefix_cache_hits=totals["prefix_hits"],
            steps=totals["steps"],
            ttft_p50=ttft[0], ttft_p95=ttft[1],
            itl_p50=itl[0], itl_p95=itl[1],
            e2e_p50=e2e[0], e2e_p95=e2e[1],
            step_line=fit_step_line(points),
            step_ms_by_width=width_medians(points),
        )
        agents = {}
        for agent, (agent_ttft, agent_itl, _) in per_agent.items():
            (ttft_p50, ttft_p95), (itl_p50, itl_p95) = _p50_p95(agent_ttft), _p50_p95(agent_itl)
            agents[agent] = AgentFigures(agent=agent, requests=requests[agent], tokens=tokens[agent],
                                         ttft_p50=ttft_p50, ttft_p95=ttft_p95, itl_p50=itl_p50, itl_p95=itl_p95)
        for agent, queried in prefix_queries.items():
            figures = agents.get(agent)
            if figures is None:
                figures = agents[agent] = AgentFigures(agent=agent, requests=requests[agent])
            figures.prefix_queries = queried
            figures.prefix_hits = prefix_hits.get(agent, 0)
        snap.agents = sorted(agents.values(), key=lambda a: a.agent)
        if window:
            _fill_window_figures(snap, window, agents, now)
        if idle_state is not None:
            snap.width_held = snap.live_lanes = snap.padding_lanes = 0
            snap.kv_used, snap.kv_cached, snap.kv_capacity, snap.queue_depth = idle_state
        return snap


def _p50_p95(values: list[float]) -> tuple[float | None, float | None]:
    ordered = sorted(values)
    return _ranked(ordered, 50), _ranked(ordered, 95)


def _fill_window_figures(snap: MetricsSnapshot, window: list[StepStats], agents: dict[str, AgentFigures],
                         now: float | None) -> None:
    last = window[-1]
    busy = sum(s.duration for s in window)
    end = last.time if now is None else max(now, last.time)
    span = max(busy, end - (window[0].time - window[0].duration))
    held = sum(s.width_held for s in window)
    useful_rows = sum(s.useful_rows for s in window)
    padding = sum(s.padding_lanes for s in window)
    snap.time = last.time
    snap.policy = last.policy
    snap.num_lanes = last.num_lanes
    snap.width_held = last.width_held
    snap.live_lanes = last.live_lanes
    snap.padding_lanes = last.padding_lanes
    snap.queue_depth = last.queue_depth
    snap.kv_used = last.kv_used
    snap.kv_capacity = last.kv_capacity
    snap.kv_cached = last.kv_cached
    snap.cached_sequences = last.cached_sequences
    snap.checkpoints = last.checkpoints
    snap.checkpoint_bytes = last.checkpoint_bytes
    snap.parked_sequences = last.parked_sequences
    snap.parked_bytes = last.parked_bytes
    queried = sum(s.prefix_queries for s in window)
    snap.prefix_window_hit_rate = sum(s.prefix_hits for s in window) / queried if queried else 0.0
    if span > 0:
        snap.tok_s = sum(s.useful_tokens for s in window) / span
        snap.padding_tok_s = padding / span
        snap.requests_s = sum(len(s.e2e) for s in window) / span
        snap.step_rate = len(window) / span
    snap.mean_step_ms = busy / len(window) * 1e3
    snap.utilization = useful_rows / held if held else 0.0
    snap.padding_share = padding / held if held else 0.0
    lane_slots = sum(s.num_lanes for s in window)
    snap.occupancy = sum(s.live_lanes for s in window) / lane_slots if lane_slots else 0.0
    per_agent = Counter(agent for s in window for agent, _ in _tokens_of(s))
    for agent, figures in agents.items():
        figures.tok_s = per_agent[agent] / span if span > 0 else 0.0


def _tokens_of(stats: StepStats) -> Iterable[tuple[str, float]]:
    yield from stats.ttft
    yield from stats.itl


# ----- where the engine thread's time goes -----

PARTS = ("device", "sampling", "host", "gil_wait", "idle")
PART_LABELS = {
    "device": "device compute (llama_decode until its outputs are ready)",
    "sampling": "sampling",
    "host": "host work on the engine thread (scheduling, batches, outputs, text)",
    "gil_wait": "waiting to run (the GIL held by another thread, or no free core)",
    "idle": "idle (nothing to compute)",
}


@dataclass(slots=True)
class StepTotals:
    """Seconds in each part, over `steps` steps, and the logits the device copied to the host."""

    device: float = 0.0
    sampling: float = 0.0
    host: float = 0.0
    gil_wait: float = 0.0
    idle: float = 0.0
    steps: int = 0
    logits_bytes: int = 0
    # Of `host`: work done while the device was computing a step (runtime.serving.engine_core's overlap),
    # which the device did not wait for.
    overlapped: float = 0.0

    @property
    def busy(self) -> float:
        """The steps' own time: everything but idle."""
        return self.device + self.sampling + self.host + self.gil_wait

    @property
    def wall(self) -> float:
        return self.busy + self.idle

    @property
    def host_share(self) -> float:
        """The share of the steps' time the device waited for the host: all but its compute and the host
        work that overlapped it."""
        return (self.busy - self.device - self.overlapped) / self.busy if self.busy else 0.0

    @property
    def device_busy_share(self) -> float:
        """The share of all the thread's time the device computed, idle included."""
        return self.device / self.wall if self.wall else 0.0

    def minus(self, earlier: StepTotals) -> StepTotals:
        return StepTotals(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, float]:
        out = {f"{part}_s": getattr(self, part) for part in PARTS}
        out.update(steps=self.steps, logits_bytes=self.logits_bytes, overlapped_s=self.overlapped,
                   host_share=self.host_share,
                   device_busy_share=self.device_busy_share)
        return out


class StepAccount:
    """Running totals, written by the engine thread and copied whole by readers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = StepTotals()

    def add_step(self, wall_s: float, cpu_s: float, result: StepResult | None) -> None:
        """One step: `wall_s` and `cpu_s` are the driving thread's, from planning to delivered outputs."""
        device = result.device_s if result is not None else 0.0
        sampling = result.sample_s if result is not None else 0.0
        engine_cpu = (result.device_cpu_s + result.sample_cpu_s) if result is not None else 0.0
        host_wall = max(0.0, wall_s - device - sampling)
        host_cpu = min(host_wall, max(0.0, cpu_s - engine_cpu))
        with self._lock:
            t = self._totals
            t.device += device
            t.sampling += sampling
            t.host += host_cpu
            t.gil_wait += host_wall - host_cpu
            if result is not None:
                t.steps += 1
                t.logits_bytes += result.logits_bytes
                t.overlapped += result.overlapped_s

    def add_idle(self, seconds: float) -> None:
        with self._lock:
            self._totals.idle += max(0.0, seconds)

    def add_host(self, wall_s: float, cpu_s: float) -> None:
        """Host work between steps (the inbox, publishing), outside any step."""
        host_cpu = min(max(0.0, cpu_s), max(0.0, wall_s))
        with self._lock:
            self._totals.host += host_cpu
            self._totals.gil_wait += max(0.0, wall_s) - host_cpu

    def totals(self) -> StepTotals:
        with self._lock:
            return StepTotals(*(getattr(self._totals, f.name) for f in fields(StepTotals)))
