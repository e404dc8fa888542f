"""Incremental detokenization: UTF-8 pieces arrive as bytes, stop strings are held back until resolved."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class StopStringDetokenizer:
    """Turns a stream of token byte pieces into text deltas that never contain a stop string.

    Bytes of an incomplete UTF-8 character wait for the rest of it. Text that could be the start of
    a stop string is held until the next pieces show whether the stop string completes.
    """

    __slots__ = ("_decoder", "_stops", "_held", "stopped", "stop_string")

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stop if s)
        self._held = ""
        self.stopped = False
        # The stop string that ended the text (the earliest one to complete), once `stopped`.
        self.stop_string: str | None = None

    @property
    def held_text(self) -> str:
        return self._held

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to emit.

        When a stop string completes, returns only the text before it and sets `stopped`.
        """
        if self.stopped:
            return ""
        if not self._stops:
            # Nothing to hold back but the tail of an incomplete character, which the decoder keeps.
            return self._decoder.decode(piece)
        self._held += self._decoder.decode(piece)
        found = self._find_stop()
        if found is not None:
            stop_at, self.stop_string = found
            self.stopped = True
            text, self._held = self._held[:stop_at], ""
            return text
        keep = self._longest_stop_prefix_suffix()
        cut = len(self._held) - keep
        text, self._held = self._held[:cut], self._held[cut:]
        return text

    def flush(self) -> str:
        """End of output: release everything held, incomplete UTF-8 as U+FFFD."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text

    def _find_stop(self) -> tuple[int, str] | None:
        found = [(i, s) for s in self._stops if (i := self._held.find(s)) >= 0]
        return min(found) if found else None

    def _longest_stop_prefix_suffix(self) -> int:
        """Length of the longest tail of the held text that begins some stop string."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(self._held)), longest, -1):
                if self._held.endswith(stop[:n]):
                    longest = n
                    break
        return longest
