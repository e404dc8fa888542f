"""The modeled card reproduces the seed article's table; expectations come from the cost model."""

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import VirtualClock
from swarm_panel.runtime.core.fit import StepLine
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.policies.registry import predicted_tok_s
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS, SwarmWorkload

WIDTH = 8
WORKLOAD = SwarmWorkload(agents=8, lengths=ARTICLE_LENGTHS, requests_per_agent=8)


def article_expectation(policy: str) -> float:
    """The article's arithmetic on the card's step line: decode steps only."""
    line = StepLine(CARD.floor_ms, CARD.per_row_ms, points=0)
    rounds = [[WORKLOAD.max_tokens(a, turn) for a in range(WORKLOAD.agents)] for turn in range(WORKLOAD.requests_per_agent)]
    return predicted_tok_s(policy, rounds, line)


def test_article_arithmetic_gives_the_article_table():
    """The seed's own figures, to the precision it quotes them."""
    assert round(article_expectation("naive")) == 122
    assert round(article_expectation("shrinking")) == 154
    assert round(article_expectation("continuous")) == 311


@pytest.mark.parametrize("policy", ["naive", "shrinking", "continuous"])
def test_modeled_engine_lands_within_1_percent_of_the_article(policy):
    result = run_closed_loop(ModeledEngine(CARD), SchedulerConfig(policy=policy, num_lanes=WIDTH), WORKLOAD,
                             VirtualClock())
    expected = article_expectation(policy)
    assert result.useful_tokens == WORKLOAD.total_output_tokens
    assert result.tok_s == pytest.approx(expected, rel=0.01)
    # Decode rows average the reference context, where the line is the article's: what remains is the
    # prompts' cost (and their chunks' KV reads), which only ever adds time.
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


def test_reads_beyond_the_reference_context_make_the_ceiling_sag():
    at_reference = CARD.step_ms(8, context_tokens=8 * CARD.reference_context)
    short = CARD.step_ms(8, context_tokens=8 * 100)
    long = CARD.step_ms(8, context_tokens=8 * 20_000)
    assert at_reference == pytest.approx(CARD.decode_step_ms(8))
    assert long > at_reference > short
    assert CARD.ceiling_tok_s(8, 20_000) < CARD.ceiling_tok_s(8) < CARD.ceiling_tok_s(8, 100)
