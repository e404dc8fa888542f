import random

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import RequestStatus
from swarm_panel.runtime.core.stats import LANE_DECODE, LANE_PREFILL
from swarm_panel.runtime.scheduling.lanes import checked_config, unfit
from swarm_panel.runtime.scheduling.step import PIECE_SHARE, piece_tokens
from tests.helpers import Harness


def _assert_drained(h: Harness) -> None:
    s = h.scheduler
    assert not s.waiting and not s.num_running and s.num_occupied_lanes == 0 and s.kv_used == 0
    assert not s.has_work


def test_switching_policy_width_and_chunk_mid_run_loses_and_duplicates_nothing():
    rng = random.Random(7)
    h = Harness(policy="naive", num_lanes=8, prefill_chunk=64)
    requests = [h.add(rng.randint(1, 120), prompt=rng.randint(1, 200), agent=f"a{i % 5}") for i in range(60)]
    choices = ["naive", "shrinking", "continuous"]
    for i in range(100_000):
        if not h.scheduler.has_work:
            break
        if i % 17 == 0:
            h.reconfigure(policy=rng.choice(choices), num_lanes=rng.randint(1, 12), prefill_chunk=rng.randint(1, 300))
        if h.step() is None and h.scheduler.waiting and not h.scheduler.num_running:
            h.clock.wait_until(h.scheduler.next_admission_time())
    for r in requests:
        assert r.status is RequestStatus.FINISHED_LENGTH
        assert r.num_output_tokens == r.sampling.max_tokens
        outs = h.outputs[r.request_id]
        assert sum(len(o.token_ids) for o in outs) == r.sampling.max_tokens
        assert [o.finished for o in outs].count(True) == 1 and outs[-1].finished
    _assert_drained(h)


def test_chunked_prefill_never_starves_running_decodes():
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=100)
    runners = [h.add(400) for _ in range(3)]
    for _ in range(5):
        h.step()
    long_prompt = h.add(5, prompt=1000)
    prefill_steps = []
    while long_prompt.num_output_tokens == 0:
        stats = h.step()
        prefill_steps.append(stats)
    assert len(prefill_steps) == 10  # 1000 prompt tokens in chunks of 100
    for stats in prefill_steps:
        assert stats.decode_rows == 3  # every running agent still decodes
        assert stats.prefill_tokens <= 100
        assert stats.lanes.count(LANE_DECODE) == 3 and stats.lanes.count(LANE_PREFILL) == 1
    h.run()
    assert all(r.num_output_tokens == 400 for r in runners)


def test_a_long_prompt_deep_in_gives_way_to_decodes_where_attention_bounds_its_chunks():
    """On a CPU a chunk's attention grows with its depth: beside decode rows, a long prompt's chunk
    gets at most a full chunk's row-cells near a prompt's start (100 tokens over 200 positions),
    its last chunk goes whole, and alone in a step it gets full chunks."""
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=100, attention_bound=True)
    runners = [h.add(400) for _ in range(3)]
    for _ in range(5):
        h.step()
    long_prompt = h.add(5, prompt=1000)
    chunks = []
    while long_prompt.num_output_tokens == 0:
        start = long_prompt.num_computed_tokens
        stats = h.step()
        assert stats.decode_rows == 3
        chunks.append((start, long_prompt.num_computed_tokens - start))
    assert chunks[:2] == [(0, 100), (100, 100)]
    assert all(n * max(start + n, 200) <= 100 * 200 for start, n in chunks[:-1])
    assert chunks[-1][1] == 1000 - chunks[-1][0] <= 100
    assert chunks[-2][1] < 30 and len(chunks) > 20
    h.run()
    assert all(r.num_output_tokens == 400 for r in runners)

    alone = Harness(policy="continuous", num_lanes=4, prefill_chunk=100, attention_bound=True)
    deep = alone.add(1, prompt=1000)
    steps = 0
    while deep.num_output_tokens == 0:
        alone.step()
        steps += 1
    assert steps == 10


def test_a_short_prompt_does_not_wait_behind_a_long_one_admitted_before_it():
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=100)
    long_prompt = h.add(5, prompt=1000)
    h.step()
    short = h.add(5, prompt=30)
    h.step()
    # First come first served would give the long prompt the whole budget for nine more steps.
    assert short.num_output_tokens == 1
    assert long_prompt.num_computed_tokens == 170
    h.run()
    assert long_prompt.num_output_tokens == 5 and short.num_output_tokens == 5


def test_a_step_spends_no_cut_on_a_few_leftover_tokens_and_leaves_no_few_for_the_next():
    """Every piece of a step is one more micro-batch pass in llama.cpp (runtime.scheduling.step)."""
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=64, prefix_cache=False)
    slack = 64 // PIECE_SHARE
    first, later = h.add(1, prompt=60), h.add(1, prompt=100)
    h.step()
    # 4 tokens of budget left: fewer than the slack, so the later prompt waits for a step of its own.
    assert (first.num_computed_tokens, later.num_computed_tokens) == (60, 0)
    h.step()
    assert later.num_computed_tokens == 64
    h.run()
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=64, prefix_cache=False)
    first, short, whole = h.add(1, prompt=60), h.add(1, prompt=10), h.add(1, prompt=64 + slack)
    stats = h.step()
    # The short prompt overshoots the budget by 6 rather than leave 6 of its tokens for another step.
    assert (first.num_computed_tokens, short.num_computed_tokens, whole.num_computed_tokens) == (60, 10, 0)
    assert stats.prefill_tokens == 70
    h.step()
    assert whole.num_computed_tokens == 64 + slack  # a remainder of `slack` goes along
    h.run()
    h = Harness(policy="continuous", num_lanes=4, prefill_chunk=64, prefix_cache=False)
    first, second, long_prompt = h.add(1, prompt=40), h.add(1, prompt=40), h.add(1, prompt=200)
    h.step()
    # 24 tokens left would split the second prompt for no gain: the next step, where it is first, takes
    # it whole. The long prompt needs cuts anyway: it takes what is left.
    assert [r.num_computed_tokens for r in (first, second, long_prompt)] == [40, 0, 24]
    h.step()
    assert [r.num_computed_tokens for r in (second, long_prompt)] == [40, 48]
    h.run()


def test_a_piece_goes_whole_within_the_slack_and_waits_below_it():
    assert piece_tokens(natural=100, available=256, prefill_chunk=256) == 100
    assert piece_tokens(natural=288, available=256, prefill_chunk=256) == 288
    assert piece_tokens(natural=289, available=256, prefill_chunk=256) == 256
    assert piece_tokens(natural=289, available=31, prefill_chunk=256) == 0
    assert piece_tokens(natural=289, available=32, prefill_chunk=256) == 32
    assert piece_tokens(natural=3, available=1, prefill_chunk=1) == 1  # a chunk of 1 still moves
    # Another prompt took part of the step: one that a later step takes whole waits for it.
    assert piece_tokens(natural=200, available=100, prefill_chunk=256, whole_budget=256) == 0
    assert piece_tokens(natural=289, available=100, prefill_chunk=256, whole_budget=256) == 100
    assert piece_tokens(natural=200, available=256, prefill_chunk=256, whole_budget=256) == 200


def test_newer_prompts_put_first_cannot_starve_the_oldest():
    h = Harness(policy="continuous", num_lanes=8, prefill_chunk=100)
    long_prompt = h.add(1, prompt=1000)
    computed = []
    while long_prompt.num_output_tokens == 0:
        # Three one-token requests of 40 prompt tokens every step: more than the budget on their own.
        for _ in range(3):
            h.add(1, prompt=40)
        before = long_prompt.num_computed_tokens
        h.step()
        computed.append(long_prompt.num_computed_tokens - before)
        assert len(computed) < 60, "the oldest prompt starved"
    assert min(computed) >= 100 // 4
    h.run()


def test_request_that_can_never_fit_is_named_at_admission_and_one_that_must_wait_waits():
    h = Harness(policy="continuous", num_lanes=8, kv_capacity=300)
    caps, budget = h.scheduler.caps, h.scheduler.kv_budget
    assert "more than the KV budget of 300" in unfit(100, 250, caps, budget)
    assert "more than the context" in unfit(10, h.engine.max_context, caps, budget)
    requests = [h.add(90, prompt=100) for _ in range(4)]
    peak = 0
    while h.scheduler.has_work:
        h.step()
        peak = max(peak, h.scheduler.kv_used)
    assert peak <= 300
    assert all(r.num_output_tokens == 90 for r in requests)
    _assert_drained(h)


def test_kv_pressure_preempts_the_newest_and_it_still_gets_exactly_its_tokens():
    h = Harness(policy="continuous", num_lanes=4, kv_capacity=400)
    requests = [h.add(180, prompt=20) for _ in range(4)]
    h.run()
    assert any(r.num_preemptions for r in requests)
    for r in requests:
        assert r.num_output_tokens == 180
        assert sum(len(o.token_ids) for o in h.outputs[r.request_id]) == 180
    assert max(s.kv_used for s in h.steps) <= 400
    _assert_drained(h)


def test_abort_frees_a_waiting_and_a_running_request():
    h = Harness(policy="continuous", num_lanes=1)
    running, waiting = h.add(50), h.add(50)
    h.step()
    h.step()
    assert h.abort(waiting) == [waiting]
    assert h.abort(running) == [running]
    h.run()
    assert running.status is waiting.status is RequestStatus.FINISHED_ABORTED
    assert h.outputs[running.request_id][-1].finish_reason == "abort"
    assert h.abort(running) == []
    _assert_drained(h)


def test_lowering_the_kv_budget_fails_requests_that_no_longer_fit():
    h = Harness(policy="continuous", num_lanes=2)
    big, small = h.add(500, prompt=100), h.add(10, prompt=10)
    h.step()
    h.reconfigure(kv_budget=200)
    h.run()
    assert big.status is RequestStatus.FINISHED_ERROR and "budget" in big.error
    assert small.status is RequestStatus.FINISHED_LENGTH
    _assert_drained(h)


def test_bad_settings_are_refused_with_a_message():
    with pytest.raises(ValueError, match="unknown policy"):
        checked_config(SchedulerConfig(policy="fifo"), EngineCaps(kv_capacity=64, max_context=64))
    with pytest.raises(ValueError, match="num_lanes"):
        SchedulerConfig(num_lanes=0)
    with pytest.raises(ValueError, match="unknown scheduler setting"):
        SchedulerConfig().with_changes(width=3)
