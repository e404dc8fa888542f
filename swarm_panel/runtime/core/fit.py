"""The step line t(B) = a + b*B, fitted from observed decode steps (each policy's prediction from it: policies.registry)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median


@dataclass(slots=True, frozen=True)
class StepLine:
    floor_ms: float
    per_row_ms: float
    points: int

    def step_ms(self, batch: int) -> float:
        return self.floor_ms + self.per_row_ms * batch

    def ceiling_tok_s(self, batch: int) -> float:
        t = self.step_ms(batch)
        return batch / t * 1e3 if t > 0 else 0.0

    def __str__(self) -> str:
        return f"t(B) = {self.floor_ms:.1f} + {self.per_row_ms:.2f}B ms"


MIN_POINTS_PER_WIDTH = 3


def width_medians(samples: Iterable[tuple[int, float]]) -> dict[int, float]:
    """The median step ms of each width (rows) seen at least MIN_POINTS_PER_WIDTH times."""
    by_width: dict[int, list[float]] = {}
    for rows, ms in samples:
        by_width.setdefault(rows, []).append(ms)
    return {w: median(v) for w, v in sorted(by_width.items()) if len(v) >= MIN_POINTS_PER_WIDTH}


def ceiling_tok_s(batch: int, measured: dict[int, float], line: StepLine | None) -> float | None:
    """B/t(B), with t(B) the steps measured at that very width where it ran often enough (a swarm
    holds its full width nearly always), else the line's; None with neither."""
    t = measured.get(batch)
    if t is not None and t > 0:
        return batch / t * 1e3
    return line.ceiling_tok_s(batch) if line is not None else None


def fit_step_line(samples: Iterable[tuple[int, float]], *, flat_when_falling: bool = False) -> StepLine | None:
    """Least squares over the per-width medians of (rows, step ms), so no width dominates by count.

    Needs at least two widths seen a few times each, and a line that rises with the width (a step
    cannot get cheaper with more rows). A falling fit from steps that merely happened is noise from
    a width seen only in passing: None. A deliberate sweep (flat_when_falling) measured every width
    at length, so a fall there means t(B) is flat within noise, and the least-squares line with a
    slope of at least 0 is the flat one through the mean.
    """
    samples = list(samples)
    medians = width_medians(samples)
    if len(medians) < 2:
        return None
    xs = list(medians)
    ys = [medians[x] for x in xs]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if b < 0:
        if not flat_when_falling:
            return None
        b = 0.0
    return StepLine(floor_ms=my - b * mx, per_row_ms=b, points=sum(rows in medians for rows, _ in samples))
