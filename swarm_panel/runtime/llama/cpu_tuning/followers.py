"""The tunings the llama engine follows step by step while it serves on a CPU: the attention kernel the
contexts served want (`AttentionFollower`), the threads other processes leave it (`ThreadGovernor`),
and how a split-KV step's rows become llama_decode calls (`plan_calls`, fitted by `CallCost`).

The attention kernel. On a CPU the two kernels cross: flash attention makes a decode step over short
contexts cheaper and over long ones much dearer (an Ice Lake Xeon, the demo model, 8 lanes: 40 against
46 ms at 150 tokens, 123 against 77 ms at 1,200; benchmarks/attention_by_context.py). The probe
(runtime.llama.cpu_tuning.flash_attn_probe) picks one kernel at load from a short context, and llama.cpp
fixes it per context, so agents whose conversations sit far from that point pay for the other kernel's
strengths. `AttentionCurve` holds the probe's decode step of 8 lanes at a short and a long context for
each kernel; `AttentionFollower` prices what the live lanes hold under both and advises a switch where
the other kernel is clearly cheaper and the recompute it costs pays back.

A switch is a new context (runtime.llama.engine.switch_attention): the live requests recompute and
the cached prefixes are gone, so it pays back over the time still to serve, which nobody knows; the
follower takes it to be as long as this kernel has served so far (at least `min_horizon_s`). At a
swarm's start little is computed and the switch is nearly free.

The thread count: what other processes take of this process's CPUs, and the threads that leaves.
llama.cpp's CPU threads meet at a barrier after every graph node, so a thread that loses its core to
another process holds all of them up. On 2 cores beside one busy process, 2 threads took up to 20 s for
a decode step that 1 thread ran in a third of a second (`benchmarks/peer_servers.py --busy-cores 1`). So
a CPU run with no thread count set runs on the cores other processes leave it, and takes the others back
once they are free again.

Decode calls: one where the rows' contexts are alike, more where one long context would make every other
row's attention walk its cells. llama.cpp runs a split-KV batch as ubatches of consecutive sequence ids
(`split_equal`), and a ubatch's attention spans, for every stream in it, as many cells as its fullest
stream holds (`get_n_kv`: the highest used cell, padded to 256). Seven rows at 200 tokens of context
beside one at 2,000 each compute 2,048 cells of attention; run apart, the long row costs one more ubatch
(a pass over the weights) instead. Which is cheaper depends on the device, the model and the attention
kernel, so the engine fits t = a * ubatches + b * rows + c * row-cells over its own decode calls
(`CallCost`), and `plan_calls` cuts the id-ordered rows only where that fit says the cells saved
outweigh the ubatches added. Until the fit is sure of what a ubatch and a cell cost, only an occasional
probe is cut.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)


# ----- the attention kernel -----

SETTINGS = ("on", "off")


def other(setting: str) -> str:
    return "off" if setting == "on" else "on"


def distinct_tokens(sequences: Sequence[Sequence[int] | np.ndarray]) -> int:
    """The tokens a recompute of these sequences computes: every prefix they share is computed once
    (the scheduler copies it into the others), so the size of their token trie, taken as each
    sequence less its longest common prefix with its neighbour in sorted order."""
    ordered = sorted(tuple(int(t) for t in seq) for seq in sequences)
    total = 0
    for previous, current in zip([()] + ordered, ordered):
        shared = 0
        for a, b in zip(previous, current):
            if a != b:
                break
            shared += 1
        total += len(current) - shared
    return total


@dataclass(frozen=True, slots=True)
class AttentionCurve:
    """A decode step of `lanes` lanes, in seconds, at two contexts, for flash attention on and off;
    and a prompt token's seconds in a chunk, (on, off)."""

    contexts: tuple[int, int]
    on: tuple[float, float]
    off: tuple[float, float]
    prompt_token: tuple[float, float]
    lanes: int = 8

    def row_s(self, setting: str, context: int) -> float:
        """One decode row's share of a full step whose lanes hold `context` tokens (a line through
        the two points, not below a tenth of the short context's cost)."""
        (c0, c1), (t0, t1) = self.contexts, getattr(self, setting)
        step = t0 + (t1 - t0) * (context - c0) / (c1 - c0)
        return max(step, 0.1 * t0) / self.lanes

    def prompt_token_s(self, setting: str) -> float:
        return self.prompt_token[SETTINGS.index(setting)]

    def as_dict(self) -> dict:
        return {"contexts": list(self.contexts), "on": list(self.on), "off": list(self.off),
                "prompt_token": list(self.prompt_token), "lanes": self.lanes}

    @classmethod
    def from_dict(cls, data: dict) -> AttentionCurve:
        return cls(tuple(data["contexts"]), tuple(data["on"]), tuple(data["off"]), tuple(data["prompt_token"]),
                   int(data["lanes"]))


class AttentionFollower:
    """Prices the live lanes' contexts under both kernels, step by step, in decayed sums, and says
    when the other kernel is worth a switch.

    A lane counts at what its decode rows attend over: its prompt and output so far, so a lane still
    computing its prompt counts before its KV exists, which is what makes a swarm's first switch free."""

    def __init__(self, curve: AttentionCurve, current: str, *, margin: float = 0.85, half_life_rows: float = 256.0,
                 min_rows: int = 8, cooldown_s: float = 60.0, min_horizon_s: float = 30.0) -> None:
        if current not in SETTINGS:
            raise ValueError(f"the kernel must be 'on' or 'off', got {current!r}")
        self.curve = curve
        self.current = current
        self.margin = margin
        self.min_rows = min_rows
        self.cooldown_s = cooldown_s
        self.min_horizon_s = min_horizon_s
        self._decay = 0.5 ** (1.0 / half_life_rows)
        self._cost = {"on": 0.0, "off": 0.0}
        self._rows = 0
        self._since: float | None = None
        self._switched_once = False
        self._next_costing = float("-inf")

    def observe(self, contexts: Iterable[int], now: float) -> None:
        """One step's live lanes, by the tokens each attends over."""
        if self._since is None:
            self._since = now
        for context in contexts:
            for setting in SETTINGS:
                self._cost[setting] = self._cost[setting] * self._decay + self.curve.row_s(setting, context)
            self._rows += 1

    @property
    def ratio(self) -> float | None:
        """The other kernel's cost over this one's, for the contexts served lately."""
        if self._rows < self.min_rows or self._cost[self.current] <= 0:
            return None
        return self._cost[other(self.current)] / self._cost[self.current]

    # What a switch recomputes: the tokens of the live and cached sequences, shared prefixes once.
    distinct_tokens = staticmethod(distinct_tokens)

    def advice(self, now: float, recompute_tokens: Callable[[], int]) -> str | None:
        """The kernel to switch to, or None: the other one must be `margin` cheaper for the contexts
        served lately, this one must have served `cooldown_s` since a switch, and what the switch
        recomputes (`recompute_tokens()`, asked only then, at the other kernel's prompt-token price)
        must pay back within as long as this kernel has served."""
        ratio = self.ratio
        if ratio is None or ratio >= self.margin or self._since is None:
            return None
        served = now - self._since
        if served < self.cooldown_s and self._switched_once:
            return None
        if now < self._next_costing:
            return None
        # Costing walks every live and cached sequence's tokens: at most once a second.
        self._next_costing = now + 1.0
        target = other(self.current)
        cost = recompute_tokens() * self.curve.prompt_token_s(target)
        if cost > (1.0 - ratio) * max(served, self.min_horizon_s):
            return None
        return target

    def switched(self, setting: str, now: float) -> None:
        """The engine now runs `setting`: the sums start again, and so does the cooldown."""
        self.current = setting
        self._cost = {"on": 0.0, "off": 0.0}
        self._rows = 0
        self._since = now
        self._switched_once = True


# ----- the thread count -----

# /proc/stat fields after the cpu name that are time a CPU spent on something: user, nice, system, irq,
# softirq and steal (a hypervisor running someone else on this CPU stalls a barrier just the same).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def affinity_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None


@dataclass(slots=True)
class CpuClock:
    """Busy seconds of the CPUs this process may run on, and this process's own CPU seconds (all its
    threads): Linux's /proc/stat and os.times()."""

    cpus: set[int]
    stat_path: str = "/proc/stat"
    tick_s: float = field(default_factory=lambda: 1.0 / os.sysconf("SC_CLK_TCK"))

    @classmethod
    def here(cls) -> CpuClock | None:
        """None where there is no /proc/stat to read (macOS, Windows)."""
        cpus = affinity_cpus()
        if cpus is None:
            return None
        clock = cls(cpus)
        try:
            clock.read()
        except (OSError, ValueError) as exc:
            log.info("CPU contention is not watched: %s", exc)
            return None
        return clock

    def read(self) -> tuple[float, float]:
        busy = 0
        with open(self.stat_path) as f:
            for line in f:
                name, _, rest = line.partition(" ")
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self.cpus:
                    values = rest.split()
                    busy += sum(int(values[i]) for i in _BUSY_FIELDS if i < len(values))
        own = os.times()
        return busy * self.tick_s, own.user + own.system


@dataclass(slots=True)
class ThreadGovernor:
    """The thread count for llama.cpp: every core it was given (`most`) but those other processes take.

    A core counts as taken once others use 0.4 of it, and the count drops at the first window that
    says so, since a stalled barrier costs at once. It only comes back after `calm_windows` windows
    in a row with others at 0.25 of a core or less, so a bursty neighbour does not flip it each second.
    """

    most: int
    cpus: int
    clock: CpuClock
    window_s: float = 1.0
    calm_windows: int = 3
    threads: int = 0
    others_cores: float = 0.0
    _last: tuple[float, float, float] | None = field(default=None, init=False, repr=False)
    _calm: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.threads = self.threads or self.most

    def start(self, now: float) -> None:
        self._last = (now, *self.clock.read())

    def poll(self, now: float) -> int | None:
        """The new thread count when it changes at this window's end, else None."""
        if self._last is None:
            self.start(now)
            return None
        then, busy0, own0 = self._last
        if now - then < self.window_s:
            return None
        busy1, own1 = self.clock.read()
        self._last = (now, busy1, own1)
        self.others_cores = max(0.0, (busy1 - busy0) - (own1 - own0)) / (now - then)
        return self._decide()

    def _decide(self) -> int | None:
        down = self._fit(self.others_cores + 0.6)
        if down < self.threads:
            self._calm = 0
            return self._set(down)
        up = self._fit(self.others_cores + 0.75)
        if up <= self.threads:
            self._calm = 0
            return None
        self._calm += 1
        if self._calm < self.calm_windows:
            return None
        self._calm = 0
        return self._set(up)

    def _fit(self, taken: float) -> int:
        return max(1, min(self.most, self.cpus - int(taken)))

    def _set(self, threads: int) -> int:
        # Fewer threads is a slowdown the user should hear of; getting them back is routine.
        log.log(logging.WARNING if threads < self.threads else logging.INFO,
                "llama.cpp threads %d -> %d: other processes use %.1f of %d cores",
                self.threads, threads, self.others_cores, self.cpus)
        self.threads = threads
        return threads


def thread_governor(most: int) -> ThreadGovernor | None:
    """A governor for a CPU run on this machine, or None where contention cannot be read or there is
    no thread to give up."""
    clock = CpuClock.here() if most > 1 else None
    if clock is None:
        return None
    return ThreadGovernor(most=most, cpus=len(clock.cpus), clock=clock)


# ----- decode calls -----

# llama.cpp pads a ubatch's span of cells to a multiple of this (llama_kv_cache::get_n_kv).
CELL_PAD = 256


@dataclass(slots=True, frozen=True)
class RowSpan:
    """What the cut needs of one row: its sequence id, the cells its stream holds once the row's
    first token is in (attention's span in the first ubatch), and whether more tokens follow."""

    seq_id: int
    cells: int
    prompt: bool = False


def padded_cells(cells: int, stream_cells: int) -> int:
    return min(stream_cells, max(CELL_PAD, -(-cells // CELL_PAD) * CELL_PAD))


@dataclass(slots=True, frozen=True)
class CallCoefficients:
    ubatch_ms: float
    row_ms: float
    cell_ms: float

    def segment_ms(self, rows: int, width: int, prompts: int) -> float:
        """One ubatch of `rows` rows (consecutive ids) spanning `width` cells each. A prompt row beside
        others leaves the rest of its tokens to a ubatch of their own; alone, its first token joins them."""
        extra = prompts if rows > 1 else 0
        return (1 + extra) * self.ubatch_ms + rows * (self.row_ms + self.cell_ms * width)


def ubatch_features(spans: Sequence[RowSpan], stream_cells: int) -> tuple[int, int, int]:
    """(ubatches, rows, row-cells) of one call of one-token rows, as llama.cpp will cut it."""
    runs = _runs(spans)
    cells = sum(len(run) * padded_cells(max(span.cells for span in run), stream_cells) for run in runs)
    return len(runs), len(spans), cells


def _runs(spans: Sequence[RowSpan]) -> list[Sequence[RowSpan]]:
    """Maximal stretches of consecutive sequence ids, in the id order `spans` come in."""
    runs: list[Sequence[RowSpan]] = []
    first = 0
    for i in range(1, len(spans) + 1):
        if i == len(spans) or spans[i].seq_id != spans[i - 1].seq_id + 1:
            runs.append(spans[first:i])
            first = i
    return runs


def plan_calls(spans: Sequence[RowSpan], cost: CallCoefficients | None, stream_cells: int) -> list[list[int]]:
    """Indices into `spans` (sorted by sequence id) for each llama_decode call, in order.

    Every ubatch is a stretch of consecutive ids, so the choice is where to cut each stretch; a
    dynamic programme finds the cheapest cut under `cost`. Cut pieces that are id-adjacent must go to
    different calls (one call would join them again); pieces that are not share a call."""
    if cost is None or len(spans) < 2:
        return [list(range(len(spans)))]
    pieces: list[range] = []
    offset = 0
    for run in _runs(spans):
        pieces += [range(offset + i, offset + j) for i, j in _cheapest_cut(run, cost, stream_cells)]
        offset += len(run)
    calls: list[list[int]] = []
    last_id: list[int] = []
    for piece in pieces:
        first_id = spans[piece[0]].seq_id
        k = next((k for k, last in enumerate(last_id) if last + 1 != first_id), len(calls))
        if k == len(calls):
            calls.append([])
            last_id.append(-2)
        calls[k].extend(piece)
        last_id[k] = spans[piece[-1]].seq_id
    return calls


def _cheapest_cut(run: Sequence[RowSpan], cost: CallCoefficients, stream_cells: int) -> list[tuple[int, int]]:
    """The cheapest cut of one stretch of consecutive ids, as (start, end) index pairs into it.

    Only block edges are tried (a block: neighbouring rows of one padded width, or one prompt row):
    a cut inside a block is never cheaper than moving it to one of the block's edges."""
    widths = [padded_cells(span.cells, stream_cells) for span in run]
    edges = [0] + [i for i in range(1, len(run))
                   if widths[i] != widths[i - 1] or run[i].prompt or run[i - 1].prompt] + [len(run)]
    if len(edges) == 2:
        return [(0, len(run))]
    n = len(edges) - 1
    best = [0.0] + [float("inf")] * n
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        width = rows = prompts = 0
        for i in range(j - 1, -1, -1):
            lo, hi = edges[i], edges[i + 1]
            width = max(width, widths[lo])
            rows += hi - lo
            prompts += run[lo].prompt
            total = best[i] + cost.segment_ms(rows, width, prompts)
            if total < best[j] - 1e-9:
                best[j], start[j] = total, i
    cuts: list[tuple[int, int]] = []
    j = n
    while j:
        cuts.append((edges[start[j]], edges[j]))
        j = start[j]
    return cuts[::-1]


# While there is no fit: a probe that cuts wherever the cut saves over 2,048 row-cells of attention
# (in cell units), so that calls of few rows beside calls of many, which the fit needs, come to exist.
PROBE = CallCoefficients(ubatch_ms=8.0 * CELL_PAD, row_ms=0.0, cell_ms=1.0)


class CallCost:
    """The line t = a * ubatches + b * rows + c * row-cells of llama_decode calls of one-token rows,
    fitted over a window of recent calls.

    A cut changes ubatches and cells, never rows, so a fit counts once a ubatch's cost is known to
    within a quarter of itself (its standard error) and a cell's is too, or is surely too small for
    any cut to pay (`max_saving_cells`, the most row-cells a cut could save: a card, where the weight
    stream dwarfs the KV). Calls that all have the same rows and ubatches cannot tell a ubatch's cost
    from a row's: until a fit counts, `for_step` is None, but every `probe_every`-th step it is PROBE.
    A fit that counts stays until a newer one does."""

    def __init__(self, max_saving_cells: int, window: int = 512, refit_every: int = 16, min_calls: int = 48,
                 probe_every: int = 4, max_relative_error: float = 0.25) -> None:
        self._calls: deque[tuple[int, int, int, float]] = deque(maxlen=window)
        self._max_saving_cells = max_saving_cells
        self._refit_every = refit_every
        self._min_calls = min_calls
        self._probe_every = probe_every
        self._max_relative_error = max_relative_error
        self._since_fit = 0
        self._unfit_steps = 0
        self.coefficients: CallCoefficients | None = None

    def for_step(self) -> CallCoefficients | None:
        if self.coefficients is not None:
            return self.coefficients
        self._unfit_steps += 1
        return PROBE if self._unfit_steps % self._probe_every == 0 else None

    def observe(self, ubatches: int, rows: int, cells: int, seconds: float) -> None:
        self._calls.append((ubatches, rows, cells, 1e3 * seconds))
        self._since_fit += 1
        if self._since_fit >= self._refit_every:
            self._since_fit = 0
            self.coefficients = self._fit() or self.coefficients

    def _fit(self) -> CallCoefficients | None:
        n = len(self._calls)
        if n < self._min_calls:
            return None
        data = np.asarray(self._calls, dtype=float)
        scale = data[:, :3].max(axis=0)
        x, y = data[:, :3] / scale, data[:, 3]
        gram = x.T @ x
        if np.linalg.cond(gram) > 1e12:
            return None
        a, b, c = np.linalg.solve(gram, x.T @ y)
        residual = y - x @ np.array([a, b, c])
        error_a, _, error_c = np.sqrt(np.clip(np.diag(np.linalg.inv(gram)) * (residual @ residual) / (n - 3), 0, None))
        if a <= 0 or b <= 0 or error_a > self._max_relative_error * a:
            return None
        tolerance = self._max_relative_error
        if not (c > 0 and error_c <= tolerance * c):
            # Negligible if the most a cut could save, at c two errors high, is under a two errors low.
            if (max(c, 0) + 2 * error_c) / scale[2] * self._max_saving_cells >= (a - 2 * error_a) / scale[0]:
                return None
            c = max(c, 0.0)
        return CallCoefficients(float(a / scale[0]), float(b / scale[1]), float(c / scale[2]))
