"""Time as the engine loop sees it: virtual for benchmarks and tests, real for serving."""

from __future__ import annotations

import time


class VirtualClock:
    """Time moves only when a step reports its duration, so a 70-second run takes milliseconds."""

    realtime = False

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def wait_until(self, t: float) -> None:
        self._now = max(self._now, t)


class RealClock:
    realtime = True

    def now(self) -> float:
        return time.monotonic()

    def advance(self, seconds: float) -> None:
        """Real time has already passed while the engine worked."""

    def wait_until(self, t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
