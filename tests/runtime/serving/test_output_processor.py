"""swarm_panel.runtime.serving.detokenize: token ids to text, stop strings and the last-token flush, for every engine."""

from __future__ import annotations

from swarm_panel.runtime.core.engine import Row, RowKind, Sample, StepPlan, StepResult
from swarm_panel.runtime.core.request import Request, RequestStatus, SamplingParams
from swarm_panel.runtime.serving.detokenize import OutputProcessor
from tests.helpers import Harness

PIECES = {1: b" ab", 2: b"c", 3: b"d", 4: "\N{SNOWMAN}".encode()[:2], 5: "\N{SNOWMAN}".encode()[2:]}


def _feed(request: Request, samples: list[Sample], max_context: int = 1000) -> str:
    """Plays the engine loop and the scheduler: one sample per step, appended to the request."""
    processor = OutputProcessor(PIECES.__getitem__, max_context)
    text = ""
    for sample in samples:
        plan = StepPlan(rows=[Row(request, RowKind.DECODE, request.num_tokens - 1, [request.token_ids[-1]], True)])
        processor.process(plan, StepResult({request.request_id: sample}, 0.0))
        request.token_ids.append(sample.token)
        text += sample.text
        if sample.stop:
            break
    return text


def test_a_stop_string_across_tokens_ends_the_output_before_it():
    request = Request([9], SamplingParams(max_tokens=10, stop=["bc", "zz"]))
    samples = [Sample(1), Sample(2), Sample(3)]
    assert _feed(request, samples) == " a"
    assert samples[1].stop and request.stop_sequence == "bc"
    assert request.num_output_tokens == 2


def test_held_text_is_released_on_the_last_token_by_max_tokens_or_context():
    for sampling, max_context in ((SamplingParams(max_tokens=2, stop=["cx"]), 1000),
                                  (SamplingParams(max_tokens=50, stop=["cx"]), 3)):
        request = Request([9], sampling)
        samples = [Sample(1), Sample(2)]
        assert _feed(request, samples, max_context) == " abc"
        assert samples[1].text == "c" and not samples[1].stop


def test_end_of_generation_adds_no_text_and_flushes_what_was_held():
    request = Request([9], SamplingParams(max_tokens=10, stop=["cx"]))
    samples = [Sample(1), Sample(2), Sample(99, end=True)]
    assert _feed(request, samples) == " abc"
    assert [s.stop for s in samples] == [False, False, True] and request.stop_sequence is None


def test_a_split_character_waits_for_its_second_token():
    request = Request([9], SamplingParams(max_tokens=10))
    samples = [Sample(4), Sample(5)]
    assert _feed(request, samples) == "\N{SNOWMAN}"
    assert samples[0].text == ""


def _modeled_run(stop: list[str]) -> tuple[Request, list]:
    """One request on the modeled engine, whose placeholder words follow the request id and position."""
    h = Harness(policy="continuous")
    request = Request([5] * 8, SamplingParams(max_tokens=12, ignore_eos=True, stop=stop), request_id=10**9)
    outputs: list = []
    request.listener = outputs.append
    h.scheduler.add(request, h.clock.now())
    h.run()
    return request, outputs


def test_the_modeled_engine_honours_stop_strings():
    free, _ = _modeled_run([])
    full = free.output_text
    assert free.status is RequestStatus.FINISHED_LENGTH and len(full.split()) == 12
    stop = full[len(full) // 2 : len(full) // 2 + 5]
    stopped, outputs = _modeled_run([stop])
    assert stopped.status is RequestStatus.FINISHED_STOPPED and stopped.stop_sequence == stop
    assert stopped.output_text == full[: full.find(stop)]
    assert stopped.num_output_tokens < 12
    assert "".join(o.text for o in outputs) == stopped.output_text and outputs[-1].finish_reason == "stop"
