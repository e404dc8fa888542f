"""How a split-KV step's rows become llama_decode calls: one where the rows' contexts are alike, more
where one long context would make every other row's attention walk its cells.

llama.cpp runs a split-KV batch as ubatches of consecutive sequence ids (`split_equal`), and a ubatch's
attention spans, for every stream in it, as many cells as its fullest stream holds (`get_n_kv`: the
highest used cell, padded to 256). Seven rows at 200 tokens of context beside one at 2,000 each
compute 2,048 cells of attention; run apart, the long row costs one more ubatch (a pass over the
weights) instead. Which is cheaper depends on the device, the model and the attention kernel, so the
engine fits t = a * ubatches + b * rows + c * row-cells over its own decode calls (`CallCost`), and
`plan_calls` cuts the id-ordered rows only where that fit says the cells saved outweigh the ubatches
added. Until the fit is sure of what a ubatch and a cell cost, only an occasional probe is cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
