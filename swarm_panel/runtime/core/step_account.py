"""Where the engine thread's time goes, step by step: the device's compute, sampling, the thread's own
host work, time it was ready to run but not running (the GIL held by another thread, or no free core),
and idle time with nothing to compute. The parts add up to the thread's wall time.

The engine reports the first two in its StepResult; the loop that drives it times the whole step in
wall and thread-CPU seconds, so host work is what is left, and its wall seconds without CPU are the wait.
On a card, every second the device waits for the host is lost; on a CPU, the host's share is the
ceiling of what overlapping them could give back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

from swarm_panel.runtime.core.engine import StepResult

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
