"""Preallocated numpy ring buffers whose newest window is always one contiguous view (no copies)."""

from __future__ import annotations

import numpy as np


class Ring:
    """Columns of float64 written twice (at i and i + capacity), so `view()` is a contiguous slice."""

    def __init__(self, capacity: int, columns: tuple[str, ...], width: int = 1, dtype=np.float64) -> None:
        self.capacity = capacity
        self.columns = columns
        self._index = {name: k for k, name in enumerate(columns)}
        shape = (len(columns), 2 * capacity) if width == 1 else (2 * capacity, width)
        self._data = np.zeros(shape, dtype=dtype)
        self.width = width
        self.count = 0  # total items ever written

    def __len__(self) -> int:
        return min(self.count, self.capacity)

    def clear(self) -> None:
        self.count = 0

    def append(self, values) -> None:
        """One row: a sequence in column order (or, for a wide ring, one row of `width` values)."""
        i = self.count % self.capacity
        if self.width == 1:
            self._data[:, i] = values
            self._data[:, i + self.capacity] = values
        else:
            self._data[i] = values
            self._data[i + self.capacity] = values
        self.count += 1

    def extend(self, rows: np.ndarray) -> None:
        """Many rows at once: shape (n, columns) or, for a wide ring, (n, width)."""
        rows = rows[-self.capacity :]
        n = len(rows)
        if n == 0:
            return
        start = self.count % self.capacity
        first = min(n, self.capacity - start)
        for offset, part in ((start, rows[:first]), (0, rows[first:])):
            if len(part) == 0:
                continue
            if self.width == 1:
                self._data[:, offset : offset + len(part)] = part.T
                self._data[:, offset + self.capacity : offset + self.capacity + len(part)] = part.T
            else:
                self._data[offset : offset + len(part)] = part
                self._data[offset + self.capacity : offset + self.capacity + len(part)] = part
        self.count += n

    def _bounds(self, last: int | None) -> tuple[int, int]:
        n = len(self)
        if last is not None:
            n = min(n, last)
        end = self.count % self.capacity + (self.capacity if self.count >= self.capacity else 0)
        if self.count < self.capacity:
            end = self.count
        return end - n, end

    def column(self, name: str, last: int | None = None) -> np.ndarray:
        lo, hi = self._bounds(last)
        return self._data[self._index[name], lo:hi]

    def rows(self, last: int | None = None) -> np.ndarray:
        """For a wide ring: the newest rows, oldest first, shape (n, width)."""
        lo, hi = self._bounds(last)
        return self._data[lo:hi]
