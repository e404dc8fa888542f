"""From sampled token ids to output text, the same for every engine: the core's detokenize stage.

An engine says which token it sampled and whether that token ends generation; this turns the token
into text (bytes of a split UTF-8 character wait for the rest), holds back text that may begin a
stop string, ends the output when a stop string completes, and releases what it holds on the
output's last token. It runs on the engine core's thread, between the engine's step and the
scheduler's update, so the scheduler sees each Sample with its text and whether it stops.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from swarm_panel.runtime.core.engine import Sample, StepPlan, StepResult
from swarm_panel.runtime.core.request import Request, reaches_length


class OutputProcessor:
    def __init__(self, piece: Callable[[int], bytes], max_context: int) -> None:
        self._piece = piece
        self.max_context = max_context
        # Per request, across preemptions (a recomputed request keeps the text it was holding).
        self._texts: dict[int, StopStringDetokenizer] = {}

    def process(self, plan: StepPlan, result: StepResult) -> None:
        """Fills in text and stop on every sample of the step, in place."""
        samples = result.samples
        if not samples:
            return
        for row in plan.rows:
            if row.sample:
                sample = samples.get(row.request.request_id)
                if sample is not None:
                    self._add(row.request, sample)

    def forget(self, request_id: int) -> None:
        """The request finished: drop what was held for it."""
        self._texts.pop(request_id, None)

    def _add(self, request: Request, sample: Sample) -> None:
        text = self._texts.get(request.request_id)
        if text is None:
            text = self._texts[request.request_id] = StopStringDetokenizer(request.sampling.stop)
        if sample.end:
            sample.text, sample.stop = text.flush(), True
            return
        sample.text = text.push(self._piece(sample.token))
        if text.stopped:
            sample.stop = True
            request.stop_sequence = text.stop_string
        elif reaches_length(request, self.max_context):
            sample.text += text.flush()


class StopStringDetokenizer:
    """Turns a stream of token byte pieces into text deltas that never contain a stop string.

    Bytes of an incomplete UTF-8 character wait for the rest of it. Text that could be the start of
    a stop string is held until the next pieces show whether the stop string completes.
    """

    __slots__ = ("_decoder", "_held", "_stops", "stop_string", "stopped")

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
