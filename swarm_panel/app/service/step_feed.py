"""The panel's one pull point: new StepStats since the last tick, into ring buffers; no Qt here.

Every view reads from this feed. Scheduler changes are detected from consecutive steps (policy,
lanes) and from the polled config (prefill chunk, KV budget), so switches made over HTTP are
marked exactly like switches made in the panel.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from swarm_panel.app.service.ring import Ring
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.stats import LANE_DECODE, LANE_EMPTY, LANE_PADDING, LANE_PREFILL, LANE_STALLED, StepStats
from swarm_panel.runtime.serving.metrics import MetricsAggregator, StepTotals

# Lane codes in the timeline image.
CODE_IDLE, CODE_DECODE, CODE_PREFILL, CODE_PADDING, CODE_STALLED = range(5)
_LANE_CODES = np.zeros(256, dtype=np.uint8)
for _char, _code in ((LANE_EMPTY, CODE_IDLE), (LANE_DECODE, CODE_DECODE), (LANE_PREFILL, CODE_PREFILL),
                     (LANE_PADDING, CODE_PADDING), (LANE_STALLED, CODE_STALLED)):
    _LANE_CODES[ord(_char)] = _code

STEP_COLUMNS = ("time", "duration", "useful", "padding", "held", "useful_rows", "live", "queue",
                "kv_used", "kv_capacity", "num_lanes", "prefill_tokens", "kv_cached", "checkpoint_bytes",
                "checkpoint_budget", "parked_bytes", "park_budget")
# utilization and occupancy in percent here (they are fractions in `window`).
TICK_COLUMNS = ("t", "tok_s", "padding_tok_s", "ceiling", "utilization", "occupancy", "live", "padding",
                "held", "queue", "kv_pct", "kv_used", "num_lanes", "kv_cached_pct", "kv_cached", "checkpoint_pct",
                "parked_pct", "device_busy")


@dataclass(slots=True, frozen=True)
class Marker:
    time: float  # seconds on the panel's axis
    column: int  # timeline column (the feed's step counter)
    label: str


class StepFeed:
    def __init__(self, step_capacity: int = 16384, tick_capacity: int = 4096, timeline_capacity: int = 1024,
                 max_lanes: int = 128, window_s: float = 1.0) -> None:
        self.t0 = time.monotonic()
        self.window_s = window_s
        self.max_lanes = max_lanes
        self.steps = Ring(step_capacity, STEP_COLUMNS)
        self.ticks = Ring(tick_capacity, TICK_COLUMNS)
        self.lanes = Ring(timeline_capacity, (), width=max_lanes, dtype=np.uint8)
        self.lanes_seen = 1
        self.markers: list[Marker] = []
        self._last_time = -math.inf
        self._last_step: tuple[str, int] | None = None
        self._last_config: SchedulerConfig | None = None
        self.ceiling_per_batch = None  # callable B -> tok/s (or None), set from the measured steps and the fit
        # The engine thread's step account (runtime.serving.metrics.StepAccount) as last read, and a window's start.
        self._times: deque[tuple[float, StepTotals]] = deque()

    def axis_time(self, monotonic: float) -> float:
        return monotonic - self.t0

    # -- pulling -------------------------------------------------------------------------------

    def pull(self, metrics: MetricsAggregator) -> list[StepStats]:
        """Takes the steps recorded since the last pull; returns them."""
        recent = metrics.recent_steps()
        k = len(recent)
        while k > 0 and recent[k - 1].time > self._last_time:
            k -= 1
        new = recent[k:]
        if new:
            self._take(new)
        return new

    def _take(self, new: list[StepStats]) -> None:
        self._last_time = new[-1].time
        rows = np.empty((len(new), len(STEP_COLUMNS)))
        lane_rows = np.zeros((len(new), self.max_lanes), dtype=np.uint8)
        for i, s in enumerate(new):
            rows[i] = (s.time - self.t0, s.duration, s.useful_tokens, s.padding_lanes, s.width_held, s.useful_rows,
                       s.live_lanes, s.queue_depth, s.kv_used, s.kv_capacity, s.num_lanes, s.prefill_tokens,
                       s.kv_cached, s.checkpoint_bytes, s.checkpoint_budget_bytes, s.parked_bytes,
                       s.park_budget_bytes)
            if s.lanes:
                codes = _LANE_CODES[np.frombuffer(s.lanes.encode("ascii", "replace"), dtype=np.uint8)]
                n = min(len(codes), self.max_lanes)
                lane_rows[i, :n] = codes[:n]
                self.lanes_seen = max(self.lanes_seen, n)
            self.lanes_seen = max(self.lanes_seen, min(s.num_lanes, self.max_lanes))
            key = (s.policy, s.num_lanes)
            if self._last_step is not None and key != self._last_step:
                self.markers.append(Marker(s.time - s.duration - self.t0, self.lanes.count + i,
                                           _change_label(self._last_step, key)))
            self._last_step = key
        self.steps.extend(rows)
        self.lanes.extend(lane_rows)

    def note_config(self, config: SchedulerConfig, now: float | None = None) -> None:
        """Marks prefill-chunk and KV-budget changes, which steps do not record, when the poll sees them."""
        last, self._last_config = self._last_config, config
        if last is None:
            return
        parts = []
        if config.prefill_chunk != last.prefill_chunk:
            parts.append(f"chunk {config.prefill_chunk}")
        if config.kv_budget != last.kv_budget:
            parts.append(f"KV {config.kv_budget or 'all'}")
        if parts:
            t = (time.monotonic() if now is None else now) - self.t0
            self.markers.append(Marker(t, self.lanes.count, ", ".join(parts)))

    def mark(self, label: str, now: float | None = None) -> None:
        """Marks an engine event that no step records (a KV layout change)."""
        t = (time.monotonic() if now is None else now) - self.t0
        self.markers.append(Marker(t, self.lanes.count, label))

    # -- figures ---------------------------------------------------------------------------------

    def window(self, start: float, end: float) -> dict[str, float]:
        """Figures over the steps that ended within [start, end] on the panel's axis."""
        t = self.steps.column("time")
        lo, hi = np.searchsorted(t, start, side="left"), np.searchsorted(t, end, side="right")
        if hi <= lo:
            return {"steps": 0, "tokens": 0.0, "padding": 0.0, "seconds": end - start, "tok_s": 0.0,
                    "padding_tok_s": 0.0, "utilization": math.nan, "occupancy": math.nan}
        col = lambda name: self.steps.column(name)[lo:hi]  # noqa: E731
        held = col("held").sum()
        tokens, padding = col("useful").sum(), col("padding").sum()
        seconds = max(end - start, 1e-9)
        return {
            "steps": int(hi - lo),
            "tokens": float(tokens),
            "padding": float(padding),
            "seconds": seconds,
            "tok_s": tokens / seconds,
            "padding_tok_s": padding / seconds,
            "utilization": col("useful_rows").sum() / held if held else math.nan,
            "occupancy": float(np.mean(col("live") / np.maximum(col("num_lanes"), 1))),
        }

    def tick(self, now: float | None = None, waiting: int | None = None) -> None:
        """Appends one point per plotted series: rates over the last window, lane counts averaged.

        `waiting` is the engine's queue right now; when no step ran lately it is the only fresh figure.
        """
        now = (time.monotonic() if now is None else now) - self.t0
        w = self.window(now - self.window_s, now)
        t = self.steps.column("time")
        lo = np.searchsorted(t, now - min(self.window_s, 0.5), side="left")
        n = len(t) - lo
        if n > 0 and len(t):
            mean = lambda name: float(self.steps.column(name)[lo:].mean())  # noqa: E731
            live, padding, held, queue = mean("live"), mean("padding"), mean("held"), mean("queue")
        elif len(t):
            live = padding = held = 0.0
            queue = float(self.steps.column("queue")[-1])
        else:
            live = padding = held = queue = 0.0
        if len(t):
            kv_used, kv_cap = self.steps.column("kv_used")[-1], self.steps.column("kv_capacity")[-1]
            kv_cached = self.steps.column("kv_cached")[-1]
            ckpt, ckpt_budget = self.steps.column("checkpoint_bytes")[-1], self.steps.column("checkpoint_budget")[-1]
            parked, park_budget = self.steps.column("parked_bytes")[-1], self.steps.column("park_budget")[-1]
            num_lanes = self.steps.column("num_lanes")[-1]
        else:
            kv_used, kv_cap, kv_cached, num_lanes = 0.0, 0.0, 0.0, math.nan
            ckpt = ckpt_budget = parked = park_budget = 0.0
        if w["steps"] == 0:
            kv_used = 0.0
        if waiting is not None and n == 0:
            queue = float(waiting)
        ceiling = self.ceiling_per_batch(int(num_lanes)) if self.ceiling_per_batch and num_lanes == num_lanes else None
        ceiling = math.nan if ceiling is None else ceiling
        self.ticks.append((now, w["tok_s"], w["padding_tok_s"], ceiling, 100 * w["utilization"], 100 * w["occupancy"], live,
                           padding, held, queue, 100.0 * kv_used / kv_cap if kv_cap else 0.0, kv_used, num_lanes,
                           100.0 * kv_cached / kv_cap if kv_cap else 0.0, kv_cached,
                           100.0 * ckpt / ckpt_budget if ckpt_budget else 0.0,
                           100.0 * parked / park_budget if park_budget else 0.0, self._device_busy()))

    def note_step_times(self, totals: StepTotals, now: float | None = None) -> None:
        """The engine thread's step account, read each tick: the device-busy share comes from its last window."""
        now = (time.monotonic() if now is None else now) - self.t0
        self._times.append((now, totals))
        while len(self._times) > 2 and self._times[1][0] <= now - self.window_s:
            self._times.popleft()

    def _device_busy(self) -> float:
        """Percent of the engine thread's time over the last window that the device computed."""
        if len(self._times) < 2:
            return math.nan
        window = self._times[-1][1].minus(self._times[0][1])
        return 100.0 * window.device_busy_share if window.wall > 0 else math.nan

    def latest(self, name: str) -> float:
        column = self.ticks.column(name, 1)
        return float(column[0]) if len(column) else math.nan


def _change_label(before: tuple[str, int], after: tuple[str, int]) -> str:
    parts = []
    if after[0] != before[0]:
        parts.append(f"→ {after[0]}")
    if after[1] != before[1]:
        parts.append(f"B={after[1]}")
    return ", ".join(parts)
