"""How much of this process's CPUs other processes take, and the llama.cpp thread count that leaves them.

llama.cpp's CPU threads meet at a barrier after every graph node, so a thread that loses its core to
another process holds all of them up. On 2 cores beside one busy process, 2 threads took up to 20 s
for a decode step that 1 thread ran in a third of a second (`benchmarks/peer_servers.py --busy-cores
1`). So a CPU run with no thread count set runs on the cores other processes leave it, and takes the
others back once they are free again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

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
