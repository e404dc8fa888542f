"""From sampled token ids to output text, the same for every engine.

An engine says which token it sampled and whether that token ends generation; this turns the token
into text (bytes of a split UTF-8 character wait for the rest), holds back text that may begin a
stop string, ends the output when a stop string completes, and releases what it holds on the
output's last token. It runs on the engine loop's thread, between the engine's step and the
scheduler's update, so the scheduler sees each Sample with its text and whether it stops.
"""

from __future__ import annotations

from collections.abc import Callable

from swarm_panel.runtime.core.engine import Sample, StepPlan, StepResult
from swarm_panel.runtime.core.request import Request, reaches_length
from swarm_panel.runtime.serving.detokenizer import StopStringDetokenizer


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
