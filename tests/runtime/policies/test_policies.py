from swarm_panel.runtime.core.request import RequestStatus
from tests.helpers import Harness


def test_naive_static_keeps_finished_lanes_as_padding_until_the_batch_ends():
    h = Harness(policy="naive", num_lanes=4)
    requests = [h.add(n) for n in (2, 5, 9, 20)]
    late = h.add(3)
    h.run()
    assert all(r.num_output_tokens == r.sampling.max_tokens for r in requests + [late])
    batch_steps = [s for s in h.steps if s.time <= requests[-1].finished_time]
    # The batch holds width 4 for every step, padding growing as lanes finish.
    assert {s.width_held for s in batch_steps} == {4}
    assert sum(s.padding_lanes for s in batch_steps) == (20 - 2) + (20 - 5) + (20 - 9)
    # Nothing is admitted until the 20-token request ends the batch.
    assert late.first_token_time > requests[-1].finished_time
    assert all(s.utilization < 1 for s in batch_steps if s.padding_lanes)


def test_shrinking_static_drops_finished_lanes_but_admits_nothing_until_the_batch_ends():
    h = Harness(policy="shrinking", num_lanes=4)
    requests = [h.add(n) for n in (2, 5, 9, 20)]
    late = h.add(3)
    h.run()
    assert all(s.padding_lanes == 0 for s in h.steps)
    widths = [s.width_held for s in h.steps if s.time <= requests[-1].finished_time]
    assert widths[0] == 4 and widths[-1] == 1 and widths == sorted(widths, reverse=True)
    assert late.first_token_time > requests[-1].finished_time


def test_continuous_refills_a_freed_lane_on_the_next_step():
    h = Harness(policy="continuous", num_lanes=4)
    requests = [h.add(n) for n in (2, 5, 9, 20)]
    late = h.add(3)
    h.run()
    assert all(s.padding_lanes == 0 for s in h.steps)
    first_done = requests[0].finished_time
    # The newcomer's prefill is in the very next step after the 2-token request ended.
    next_step = next(s for s in h.steps if s.time > first_done)
    assert next_step.prefill_tokens == late.num_prompt_tokens
    assert late.finished_time < requests[-1].finished_time
    assert late.status is RequestStatus.FINISHED_LENGTH


def test_static_batch_starts_short_after_the_admission_wait():
    h = Harness(policy="naive", num_lanes=8, admission_wait_s=0.5)
    request = h.add(3)
    assert h.step() is None  # one request waits for company
    h.clock.wait_until(h.scheduler.next_admission_time())
    h.run()
    assert request.first_token_time >= 0.5
    assert request.num_output_tokens == 3
