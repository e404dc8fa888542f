"""The modeled card reproduces the seed article's table; expectations come from the cost model."""

import pytest

from runtime.clock import VirtualClock
from runtime.closed_loop import run_closed_loop
from runtime.config import SchedulerConfig
from runtime.modeled_engine import ModeledEngine
from runtime.profiles import RX_9070_XT_QWEN35_9B as CARD
from runtime.workload import ARTICLE_LENGTHS, SwarmWorkload

WIDTH = 8
WORKLOAD = SwarmWorkload(agents=8, lengths=ARTICLE_LENGTHS, requests_per_agent=8)


def article_expectation(policy: str) -> float:
    """The article's arithmetic: decode steps at t(B) = floor + per_row*B, prefill and KV reads ignored."""
    lengths = sorted(ARTICLE_LENGTHS)
    useful = sum(lengths)
    if policy == "naive":
        return useful / (lengths[-1] * CARD.decode_step_ms(WIDTH) / 1e3)
    if policy == "shrinking":
        ms, done = 0.0, 0
        for i, n in enumerate(lengths):
            ms += (n - done) * CARD.decode_step_ms(WIDTH - i)
            done = n
        return useful / (ms / 1e3)
    return CARD.ceiling_tok_s(WIDTH)


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
def test_modeled_engine_lands_within_1_5_percent_of_the_article(policy):
    result = run_closed_loop(ModeledEngine(CARD), SchedulerConfig(policy=policy, max_batch=WIDTH), WORKLOAD,
                             VirtualClock())
    expected = article_expectation(policy)
    assert result.useful_tokens == WORKLOAD.total_output_tokens
    assert result.tok_s == pytest.approx(expected, rel=0.015)
    # Prefill and KV reads only ever cost time.
    assert result.tok_s < expected


def test_utilization_matches_the_article_gantt():
    lengths = ARTICLE_LENGTHS
    naive = run_closed_loop(ModeledEngine(CARD), SchedulerConfig(policy="naive"), WORKLOAD, VirtualClock())
    assert naive.utilization == pytest.approx(sum(lengths) / (WIDTH * max(lengths)), abs=0.002)
    continuous = run_closed_loop(ModeledEngine(CARD), SchedulerConfig(policy="continuous"), WORKLOAD, VirtualClock())
    assert continuous.utilization > 0.99


def test_the_gain_of_continuous_batching_grows_with_length_spread():
    gains = []
    for spread in (0.0, 0.5, 1.0):
        workload = SwarmWorkload(requests_per_agent=4, spread=spread)
        tok_s = {
            policy: run_closed_loop(ModeledEngine(CARD), SchedulerConfig(policy=policy), workload,
                                    VirtualClock()).tok_s
            for policy in ("naive", "continuous")
        }
        gains.append(tok_s["continuous"] / tok_s["naive"])
    assert gains[0] == pytest.approx(1.0, abs=0.02)  # equal lengths: static batching wastes nothing
    assert gains[0] < gains[1] < gains[2]


def test_kv_capacity_follows_from_the_card_and_reads_make_the_ceiling_sag():
    free_bytes = (CARD.vram_gib - CARD.weights_gib - CARD.reserved_gib) * 1024**3
    assert CARD.kv_capacity_tokens == int(free_bytes // CARD.kv_bytes_per_token)
    short = CARD.step_ms(8, context_tokens=8 * 100)
    long = CARD.step_ms(8, context_tokens=8 * 20_000)
    assert long > short > CARD.decode_step_ms(8)
