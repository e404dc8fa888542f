"""The attention kernel follows the contexts served: where the probe's curve says the other kernel's
decode step is clearly cheaper for what the live lanes hold, and the recompute pays back, the engine
switches kernels between steps (a new context), and the requests still get a fresh computation's
greedy tokens. Unit checks of the rule, then the real llama.cpp engine on both architectures."""

from __future__ import annotations

import threading

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RelayoutKind
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning import flash_attn_probe as probe
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import ProbeLayout, decide_flash_attn
from swarm_panel.runtime.llama.cpu_tuning.followers import AttentionCurve, AttentionFollower, distinct_tokens
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.serving.engine_core import EngineThread

# Flash attention cheaper at 100 tokens, the plain path far cheaper at 1,000 (as on an Ice Lake Xeon).
CURVE = AttentionCurve(contexts=(100, 1000), on=(0.040, 0.120), off=(0.045, 0.075), prompt_token=(0.003, 0.003))


def test_the_curve_prices_a_row_on_the_line_through_its_two_points():
    assert CURVE.row_s("on", 100) == pytest.approx(0.040 / 8)
    assert CURVE.row_s("off", 550) == pytest.approx(0.060 / 8)
    # Past the long point it goes on along the line; far below the short one it keeps a floor.
    assert CURVE.row_s("on", 1900) == pytest.approx(0.200 / 8)
    assert CURVE.row_s("on", -10_000) == pytest.approx(0.004 / 8)
    assert AttentionCurve.from_dict(CURVE.as_dict()) == CURVE


def test_long_contexts_turn_flash_attention_off_once_enough_rows_are_seen():
    follower = AttentionFollower(CURVE, "on", min_rows=16)
    follower.observe([1000] * 8, now=0.0)
    assert follower.advice(1.0, recompute_tokens=lambda: 0) is None, "8 rows are too few to go by"
    follower.observe([1000] * 8, now=1.0)
    assert follower.ratio == pytest.approx(0.075 / 0.120)
    assert follower.advice(1.0, recompute_tokens=lambda: 0) == "off"


def test_short_contexts_keep_it_and_a_near_tie_keeps_either():
    short = AttentionFollower(CURVE, "on", min_rows=8)
    short.observe([120] * 16, now=0.0)
    assert short.advice(5.0, recompute_tokens=lambda: 0) is None
    # At 300 tokens the plain path is 11% cheaper here: inside the margin, no switch.
    tie = AttentionFollower(CURVE, "on", min_rows=8)
    tie.observe([300] * 16, now=0.0)
    assert 0.85 < tie.ratio < 1.0 and tie.advice(5.0, recompute_tokens=lambda: 0) is None


def test_a_switch_must_pay_back_its_recompute():
    follower = AttentionFollower(CURVE, "on", min_rows=8, min_horizon_s=30.0)
    follower.observe([1000] * 16, now=0.0)
    saving = 1 - 0.075 / 0.120
    # 30 s at a 37.5% saving buys back 11.25 s: 3,700 tokens at 3 ms, not 3,800.
    assert follower.advice(1.0, recompute_tokens=lambda: 3800) is None
    # Costed at most once a second: a second later, a smaller recompute pays back.
    assert follower.advice(1.5, recompute_tokens=lambda: 3700) is None
    assert follower.advice(2.0, recompute_tokens=lambda: 3700) == "off"
    # Served longer, the larger one pays back too.
    assert follower.advice(60.0, recompute_tokens=lambda: 3800) == "off"
    assert saving * 60.0 > 3800 * 0.003


def test_a_recompute_counts_a_shared_prefix_once():
    system = list(range(100))
    agents = [system + [1000 + k] * (10 + k) for k in range(4)]
    assert distinct_tokens(agents) == 100 + sum(10 + k for k in range(4))
    assert distinct_tokens([[5, 6, 7], [5, 6], [9]]) == 4
    assert distinct_tokens([]) == 0


def test_after_a_switch_it_starts_again_and_waits_out_the_cooldown():
    follower = AttentionFollower(CURVE, "on", min_rows=8, cooldown_s=60.0)
    follower.observe([1000] * 16, now=0.0)
    follower.switched("off", now=10.0)
    assert follower.current == "off" and follower.ratio is None
    follower.observe([50] * 16, now=11.0)
    assert follower.ratio < 0.85
    assert follower.advice(20.0, recompute_tokens=lambda: 0) is None, "inside the cooldown"
    assert follower.advice(71.0, recompute_tokens=lambda: 0) == "on"


def test_the_probe_times_the_curve_and_remembers_it(tmp_path, arch_model_path):
    layout = ProbeLayout(n_ctx=4096, lanes=2, kv_unified=False)
    curve = probe.time_curve(arch_model_path, False, 1, layout)
    assert curve.contexts == (300, 1536) and curve.lanes == 2
    assert all(0 < t < 5 for t in (*curve.on, *curve.off, *curve.prompt_token))
    timed = []

    def measure_curve(*args):
        timed.append(args)
        return curve

    how = {"cpu_only": True, "kv_type": "f16", "cache_path": tmp_path / "fa.json", "measure_curve": measure_curve}
    first = decide_flash_attn(arch_model_path, "auto", layout, measure=lambda *a: (0.04, 0.05), **how)
    again = decide_flash_attn(arch_model_path, "auto", layout, measure=lambda *a: (0.09, 0.05), **how)
    assert first.curve == again.curve == curve and again.setting == "on" and len(timed) == 1
    # A unified pool's costs differ from the split curve's: none is timed for it.
    unified = decide_flash_attn(arch_model_path, "auto", ProbeLayout(4096, 2, True), measure=lambda *a: (0.04, 0.05),
                                **how)
    assert unified.curve is None and len(timed) == 1


def _run(engine: LlamaEngine, prompts: list[list[int]], follower: AttentionFollower | None) -> list[list[int]]:
    thread = EngineThread(engine, SchedulerConfig(policy="continuous", num_lanes=4, prefill_chunk=64))
    thread.relayouts.attention = follower
    done = [threading.Event() for _ in prompts]
    tokens: list[list[int]] = [[] for _ in prompts]
    thread.start()
    try:
        for i, prompt in enumerate(prompts):
            request = Request(prompt, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))

            def listen(output, i=i):
                tokens[i] += output.token_ids
                if output.finished:
                    done[i].set()

            request.listener = listen
            thread.submit(request)
        assert all(d.wait(120) for d in done), "a request never finished"
    finally:
        thread.stop()
    return tokens


def _prompts(engine: LlamaEngine, length: int) -> list[list[int]]:
    n = engine.vocab.n_tokens
    return [[engine.vocab.bos] + [16 + (i * 7 + k * 31) % (n - 16) for i in range(length - 1)] for k in range(4)]


def test_served_long_contexts_switch_the_kernel_and_keep_fresh_greedy_tokens(arch_model_path):
    """The switch lands while the prompts compute (no token sampled yet), so every request's tokens
    are the plain path's from the first: the same as an engine that ran it from the start."""
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=256, kv_unified=False,
                     flash_attn="on", attention_curve=CURVE) as engine:
        prompts = _prompts(engine, 600)
        follower = AttentionFollower(CURVE, "on", min_rows=4)
        switched = _run(engine, prompts, follower)
        assert engine.flash_attn == "off" and follower.current == "off"
        assert engine.facts.flash_attn_reason.startswith("off: switched for the contexts served lately")
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=256, kv_unified=False,
                     flash_attn="off") as fresh:
        assert _run(fresh, prompts, None) == switched
    assert all(len(t) == 24 for t in switched)


def test_short_contexts_leave_the_kernel_alone(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=256, kv_unified=False,
                     flash_attn="on", attention_curve=CURVE) as engine:
        follower = AttentionFollower(CURVE, "on", min_rows=4)
        _run(engine, _prompts(engine, 60), follower)
        assert engine.flash_attn == "on" and follower.current == "on"


def test_a_widened_pool_runs_flash_attention_and_narrowing_brings_the_split_kernel_back(tiny_model_path):
    """In one pool the plain path multiplies each row by every sequence's cells: a kernel the probe chose
    turns to flash attention while widened, and back to the split layout's own (with its reason) after."""
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True, flash_attn="off",
                     flash_attn_reason="off: the probe's", attention_curve=CURVE) as engine:
        engine.relayout(RelayoutKind.WIDEN, "a test")
        assert engine.flash_attn == "on" and engine.caps.narrows_to == 4096
        assert engine.facts.flash_attn_reason.startswith("on: the KV widened to one pool")
        engine.relayout(RelayoutKind.NARROW, "after a test")
        assert (engine.flash_attn, engine.facts.flash_attn_reason) == ("off", "off: the probe's")
    # A kernel chosen by setting has no curve: it is kept whatever the layout.
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=8192, kv_unified=False, widens=True,
                     flash_attn="off") as engine:
        engine.relayout(RelayoutKind.WIDEN, "a test")
        assert engine.flash_attn == "off"


def test_a_widening_request_is_served_by_flash_attention_with_fresh_greedy_tokens(arch_model_path):
    """A prompt past a lane's share widens the layout as it is queued, before any token of the others is
    sampled: every request's tokens are then those of an engine unified with flash attention from the start."""
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=256, kv_unified=False, widens=True,
                     flash_attn="off", attention_curve=CURVE) as engine:
        prompts = _prompts(engine, 60)
        prompts[0] = _prompts(engine, 1100)[0]
        widened = _run(engine, prompts, AttentionFollower(CURVE, "off", min_rows=4))
        assert engine.kv_unified and engine.flash_attn == "on"
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=4 * 1024, n_batch=256, kv_unified=True,
                     flash_attn="on") as fresh:
        assert _run(fresh, prompts, None) == widened
    assert all(len(t) == 24 for t in widened)
