"""The modeled card's KV type and context: step cost, capacity and the ceiling follow the memory plan."""

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import Row as PlanRow
from swarm_panel.runtime.core.engine import RowKind, StepPlan, VirtualClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.modeled.ceiling import DEFAULT_CONTEXTS, ceiling, ceiling_table
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as CARD
from swarm_panel.runtime.planning.memory_plan import (
    KV_TYPES,
    PlanSettings,
    kv_bytes_per_token,
    plan_memory,
    recurrent_bytes_per_sequence,
)
from swarm_panel.runtime.planning.shape import QWEN35_9B
from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
from swarm_panel.runtime.workloads.workload import SwarmWorkload

BYTES_PER_MS = CARD.bandwidth_gbs * 1e9 / 1e3


def decode_plan(contexts: list[int]) -> StepPlan:
    """One decode row per sequence, each feeding its last token at `context` - 1."""
    rows = []
    for context in contexts:
        request = Request(list(range(3, 3 + context)), SamplingParams(max_tokens=4))
        rows.append(PlanRow(request, RowKind.DECODE, context - 1, [request.token_ids[-1]], sample=True))
    return StepPlan(rows)


def test_the_profile_takes_its_bytes_from_the_plan_and_f16_keeps_the_old_figures():
    assert CARD.kv_type == "f16"
    assert CARD.kv_bytes_per_token == kv_bytes_per_token(QWEN35_9B, "f16") == 8 * 2 * 4 * 256 * 2 == 32768
    # The hand formula it replaces: 24 layers of 32 value heads' 128 x 128 f32 state and a 3-token conv window.
    assert CARD.recurrent_state_bytes == recurrent_bytes_per_sequence(QWEN35_9B) == \
        24 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 4)
    for kv in KV_TYPES:
        assert CARD.with_kv_type(kv).kv_bytes_per_token == kv_bytes_per_token(QWEN35_9B, kv)
    with pytest.raises(ValueError):
        CARD.with_kv_type("q5_1")


def test_the_seed_line_is_exact_at_the_reference_context():
    for batch in (1, 2, 4, 8, 16):
        line = CARD.floor_ms + CARD.per_row_ms * batch
        assert CARD.decode_step_ms(batch) == pytest.approx(line, rel=1e-12)
        assert CARD.step_ms(batch, context_tokens=batch * CARD.reference_context) == pytest.approx(line, rel=1e-12)
    # The article's own figures: 18.0, 25.7 and 34.5 ms, 311 tok/s at 8.
    assert [round(CARD.decode_step_ms(b), 1) for b in (1, 8, 16)] == [18.0, 25.7, 34.5]
    assert round(CARD.ceiling_tok_s(8)) == 311


def test_the_reference_context_is_the_bench_workloads_mean_decode_context():
    assert CARD.reference_context == round(SwarmWorkload().mean_decode_context)


@pytest.mark.parametrize("kv_type", KV_TYPES)
def test_a_step_grows_with_context_by_exactly_the_plans_kv_bytes_over_the_bandwidth(kv_type):
    engine = ModeledEngine(CARD.with_kv_type(kv_type))
    assert engine.kv_type == kv_type and engine.facts.kv_type == kv_type
    read_ms = kv_bytes_per_token(QWEN35_9B, kv_type) / BYTES_PER_MS
    short = engine.step(decode_plan([1000] * 8)).duration_s * 1e3
    long = engine.step(decode_plan([1000] * 7 + [9000])).duration_s * 1e3
    assert long - short == pytest.approx(8000 * read_ms, rel=1e-9)
    # Each sequence reads its own: eight sequences 100 tokens longer cost eight times one.
    longer = engine.step(decode_plan([1100] * 8)).duration_s * 1e3
    assert longer - short == pytest.approx(800 * read_ms, rel=1e-9)


def test_quantized_kv_reads_less_so_a_long_context_step_costs_less():
    steps = [CARD.with_kv_type(kv).decode_step_ms(8, 32768) for kv in KV_TYPES]
    assert steps[0] > steps[1] > steps[2] > CARD.decode_step_ms(8)


@pytest.mark.parametrize("kv_type, ratio", [("q8_0", 64 / 34), ("q4_0", 64 / 18)])
def test_the_kv_type_changes_capacity_by_the_plans_ratio(kv_type, ratio):
    f16, other = CARD.kv_capacity_tokens, CARD.with_kv_type(kv_type).kv_capacity_tokens
    plan_ratio = kv_bytes_per_token(QWEN35_9B, "f16") / kv_bytes_per_token(QWEN35_9B, kv_type)
    assert plan_ratio == pytest.approx(ratio)
    assert other / f16 == pytest.approx(plan_ratio, abs=1e-4)
    assert ModeledEngine(CARD.with_kv_type(kv_type)).caps.kv_capacity == other
    # The recurrent state's bytes stay; in smaller tokens it is worth more of them.
    assert CARD.with_kv_type(kv_type).state_tokens_per_sequence == pytest.approx(
        CARD.state_tokens_per_sequence * plan_ratio, abs=1)


def test_the_kv_pool_is_what_the_plan_leaves_beside_weights_and_buffers():
    plan = plan_memory(QWEN35_9B, PlanSettings(lanes=1, context=CARD.max_context, flash_attn=True),
                       device_bytes=CARD.device_bytes, reserve=CARD.reserve_bytes)
    free = CARD.device_bytes - CARD.reserve_bytes - plan.weights - plan.compute - plan.output
    assert CARD.kv_capacity_tokens == free // 32768


@pytest.mark.parametrize("kv_type", KV_TYPES)
def test_the_ceilings_lanes_fit_the_card_per_the_plan_and_one_more_does_not(kv_type):
    card = CARD.with_kv_type(kv_type)
    for context in DEFAULT_CONTEXTS:
        top = ceiling(card, context)
        settings = {"context": context, "kv_type": kv_type, "n_batch": card.n_batch, "flash_attn": True}
        assert top.lanes >= 1
        assert plan_memory(QWEN35_9B, PlanSettings(lanes=top.lanes, **settings), device_bytes=card.device_bytes,
                           reserve=card.reserve_bytes).fits
        assert not plan_memory(QWEN35_9B, PlanSettings(lanes=top.lanes + 1, **settings),
                               device_bytes=card.device_bytes, reserve=card.reserve_bytes).fits
        # The engine's pool holds them too, each with its recurrent state.
        assert top.lanes * (context + card.state_tokens_per_sequence) <= card.kv_capacity_tokens
        assert top.tok_s == pytest.approx(top.lanes / card.decode_step_ms(top.lanes, context) * 1e3)


def test_the_ceiling_sags_with_context_and_quantized_kv_holds_it_up():
    contexts = (CARD.reference_context, *DEFAULT_CONTEXTS)
    table = ceiling_table(CARD, contexts)
    for kv, row in table.items():
        tok_s = [c.tok_s for c in row]
        assert tok_s == sorted(tok_s, reverse=True) and tok_s[0] > tok_s[-1], kv
        lanes = [c.lanes for c in row]
        assert lanes == sorted(lanes, reverse=True), kv
    for i, context in enumerate(contexts):
        if context >= 4096:
            assert table["q4_0"][i].tok_s >= table["q8_0"][i].tok_s >= table["f16"][i].tok_s
    # At 64k the f16 ceiling is well under half of what it was at the reference context; q4_0 keeps more.
    assert table["f16"][-1].tok_s < 0.2 * table["f16"][0].tok_s
    assert table["q4_0"][-1].tok_s > 2.5 * table["f16"][-1].tok_s


def test_at_the_reference_context_the_f16_ceiling_is_the_seed_lines_value():
    top = ceiling(CARD, CARD.reference_context)
    assert top.tok_s == pytest.approx(top.lanes / (CARD.floor_ms + CARD.per_row_ms * top.lanes) * 1e3, rel=1e-12)
    eight = ceiling(CARD, CARD.reference_context, max_lanes=8)
    assert eight.lanes == 8 and eight.tok_s == pytest.approx(8 / 25.7 * 1e3, rel=1e-12)


def test_a_long_context_swarm_runs_slower_on_f16_than_on_q4_0():
    """The same long-context swarm in virtual time: quantized KV reads less every step."""
    workload = SwarmWorkload(agents=8, lengths=(64,), requests_per_agent=2, prompt_tokens=12000)
    config = SchedulerConfig(policy="continuous", num_lanes=8, prefix_cache=False)
    tok_s = {kv: run_closed_loop(ModeledEngine(CARD.with_kv_type(kv)), config, workload, VirtualClock()).tok_s
             for kv in ("f16", "q4_0")}
    assert tok_s["q4_0"] > tok_s["f16"]
