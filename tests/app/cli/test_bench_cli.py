import json

import pytest

from swarm_panel.app.cli.main import main

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def test_bench_json_contract(capsys):
    code = main(["bench", "--engine", "modeled", "--policy", "all", "--agents", "8",
                 "--lengths", "40,90,150,220,300,480,650,900", "--requests-per-agent", "8", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["naive", "shrinking", "continuous"]
    for r in out["results"]:
        assert isinstance(r["useful_tokens"], int) and isinstance(r["steps"], int)
        for key in ("utilization", "tok_s", "seconds"):
            assert isinstance(r[key], float)
    tok_s = [r["tok_s"] for r in out["results"]]
    assert tok_s[0] < tok_s[1] < tok_s[2]


def test_bench_scales_to_64_agents_and_lanes(capsys):
    assert main(["bench", "--agents", "64", "--num-lanes", "64", "--requests-per-agent", "2", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results[2]["tok_s"] > results[0]["tok_s"]


def test_bench_table_and_overhead_print_figures(capsys):
    assert main(["bench", "--policy", "continuous", "--requests-per-agent", "1"]) == 0
    assert "continuous" in capsys.readouterr().out
    assert main(["overhead", "--lanes", "64", "--steps", "200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["running"] == 64 and report["median_ms"] > 0


def test_bad_arguments_give_a_readable_error(capsys):
    assert main(["bench", "--agents", "0"]) == 2
    assert "agents" in capsys.readouterr().err


def test_a_missing_or_corrupt_model_is_a_clear_cli_error(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"\x00GGUFnot really" * 10)
    for path in (tmp_path / "absent.gguf", corrupt):
        assert main(["serve", "--engine", "llama", "--model", str(path), "--port", "0"]) != 0
        err = capsys.readouterr().err
        assert "cannot load model" in err and str(path) in err
    assert main(["bench", "--engine", "llama", "--model", str(tmp_path / "absent.gguf"),
                 "--requests-per-agent", "1"]) != 0
    assert "cannot load model" in capsys.readouterr().err


def test_fit_recovers_the_modeled_cards_step_line_at_the_workloads_context(capsys):
    from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as card
    from swarm_panel.runtime.workloads.workload import SwarmWorkload

    args = ["--agents", "8", "--lengths", "40,90,150,220,300,480,650,900", "--requests-per-agent", "2"]
    assert main(["bench", "--engine", "modeled", "--policy", "continuous", "--fit", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fit = out["fit"]
    assert abs(fit["floor_ms"] - card.floor_ms) < 0.05 * card.floor_ms
    assert abs(fit["per_row_ms"] - card.per_row_ms) < 0.05 * card.per_row_ms
    workload = SwarmWorkload(agents=8, lengths=(40, 90, 150, 220, 300, 480, 650, 900), requests_per_agent=2)
    # Decode rows of a 900-token answer outnumber those of a 40-token one: the mean is weighted by rows.
    assert abs(fit["context_tokens"] - workload.mean_decode_context) <= 1
    assert workload.mean_decode_context > 32 + sum(workload.lengths) / len(workload.lengths) / 2
    prediction = out["results"][0]["predicted_tok_s"]
    assert prediction == pytest.approx(8 / (fit["floor_ms"] + 8 * fit["per_row_ms"]) * 1e3)


def test_fit_sweeps_widths_whose_prompts_take_longer_than_the_decodes(capsys):
    """16 prompts of ~590 tokens take 37 chunked steps to compute, longer than 24 decode steps: the
    first sequences must keep decoding until the last ones join, or B=16 is never measured."""
    from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B as card

    assert main(["bench", "--engine", "modeled", "--policy", "continuous", "--agents", "2", "--lengths", "4",
                 "--requests-per-agent", "1", "--fit", "--fit-widths", "1,16", "--fit-context", "600",
                 "--fit-steps", "24", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["fit"]
    assert set(fit["median_step_ms"]) == {"1", "16"}
    assert abs(fit["per_row_ms"] - card.per_row_ms) < 0.05 * card.per_row_ms


def test_mean_decode_context_counts_the_conversation_so_far():
    from swarm_panel.runtime.workloads.workload import SwarmWorkload

    single = SwarmWorkload(agents=1, lengths=(10,), requests_per_agent=3, prompt_tokens=20)
    assert single.mean_decode_context == pytest.approx(20 + 4.5)
    talk = SwarmWorkload(agents=1, lengths=(10,), requests_per_agent=3, prompt_tokens=20, conversation=True,
                         tool_tokens=5, system_tokens=100)
    # Turn t's prompt holds the system prompt, the task and t earlier replies plus tool results.
    assert talk.mean_decode_context == pytest.approx(120 + 15 + 4.5)


def test_llama_fit_is_measured_at_the_asked_context(tiny_model_path, capsys):
    base = ["bench", "--engine", "llama", "--model", str(tiny_model_path), "--policy", "continuous",
            "--agents", "2", "--lengths", "4", "--requests-per-agent", "1", "--fit", "--fit-widths", "1,2",
            "--fit-steps", "6", "--n-ctx", "1024", "--json"]
    assert main([*base, "--fit-context", "300"]) == 0
    fit = json.loads(capsys.readouterr().out)["fit"]
    assert fit["context_tokens"] == 300
    assert set(fit["median_step_ms"]) == {"1", "2"}
    # More than the engine holds at the widest width is clamped, not an error.
    assert main([*base, "--fit-context", "5000"]) == 0
    fit = json.loads(capsys.readouterr().out)["fit"]
    assert fit["context_tokens"] <= 1024 // 2


def test_line_pricing_takes_a_prompt_tokens_price_from_the_run():
    from types import SimpleNamespace

    from swarm_panel.app.cli.bench import LinePricing
    from swarm_panel.runtime.core.fit import StepLine

    def step(decode, prompt, padding, useful, ms):
        return SimpleNamespace(decode_rows=decode, prefill_tokens=prompt, padding_lanes=padding,
                               useful_tokens=useful, duration=ms / 1e3)

    pricing = LinePricing(StepLine(floor_ms=10.0, per_row_ms=2.0, points=6), width=4)
    # The line prices 4 rows at 18 ms: the 6 prompt tokens took 12 ms more, 2 ms each.
    pricing.add(step(4, 6, 0, 4, 30.0))
    pricing.add(step(4, 0, 0, 4, 20.0))
    pricing.add(step(2, 0, 2, 2, 25.0))
    assert pricing.prompt_token_ms == pytest.approx(2.0)
    # Steps without a prompt at the line's price (padding rows too), the prompt step as it ran.
    assert pricing.tok_s == pytest.approx(10 / (18 + 18 + 30) * 1e3)
    # The best schedule: 10 tokens in 2.5 full steps' floors, 10 decode rows, 6 prompt tokens at 2 ms.
    assert pricing.bound_tok_s == pytest.approx(10 / (2.5 * 10 + 10 * 2.0 + 6 * 2.0) * 1e3)
    assert pricing.tok_s < pricing.bound_tok_s < pricing.line.ceiling_tok_s(4)
    # Only the step of 4 decode rows and no prompt is a full-width decode step.
    assert pricing.full_width_summary() == {"steps": 1, "median": pytest.approx(20.0), "mean": pytest.approx(20.0)}


def test_a_cheap_prompt_is_priced_as_it_ran_not_as_rows():
    """Hundreds of prompt tokens in one chunk cost a CPU far less than as many decode rows: the bound
    must not fall below what the run itself did."""
    from types import SimpleNamespace

    from swarm_panel.app.cli.bench import LinePricing
    from swarm_panel.runtime.core.fit import StepLine

    pricing = LinePricing(StepLine(floor_ms=16.0, per_row_ms=5.0, points=6), width=8)
    pricing.add(SimpleNamespace(decode_rows=0, prefill_tokens=256, padding_lanes=0, useful_tokens=8,
                                duration=0.3))
    for _ in range(3):
        pricing.add(SimpleNamespace(decode_rows=8, prefill_tokens=0, padding_lanes=0, useful_tokens=8,
                                    duration=0.060))
    measured = 32 / (0.3 + 3 * 0.060)
    assert pricing.prompt_token_ms == pytest.approx((300 - 16) / 256)
    assert pricing.bound_tok_s >= measured


def test_a_prompt_step_under_the_line_is_no_credit():
    """A prompt step that a noisy machine ran faster than the line prices its rows: the run's figure
    must not climb above the best schedule's (CI saw 1,842 against a bound of 1,825)."""
    from types import SimpleNamespace

    from swarm_panel.app.cli.bench import LinePricing
    from swarm_panel.runtime.core.fit import StepLine

    pricing = LinePricing(StepLine(floor_ms=10.0, per_row_ms=2.0, points=6), width=2)
    # The line prices the prompt step's 2 rows at 14 ms; it ran in 11.
    pricing.add(SimpleNamespace(decode_rows=2, prefill_tokens=6, padding_lanes=0, useful_tokens=2, duration=0.011))
    pricing.add(SimpleNamespace(decode_rows=2, prefill_tokens=0, padding_lanes=0, useful_tokens=2, duration=0.014))
    assert pricing.prompt_token_ms == 0.0
    assert pricing.tok_s == pytest.approx(4 / (14 + 14) * 1e3)
    assert pricing.tok_s <= pricing.bound_tok_s


def test_llama_fit_sweeps_in_rounds_and_prices_the_run(tiny_model_path, capsys, monkeypatch):
    from swarm_panel.app.cli import bench

    runs = []
    closed_loop = bench.run_closed_loop
    monkeypatch.setattr(bench, "run_closed_loop", lambda *a, **kw: runs.append(a[2].agents) or closed_loop(*a, **kw))
    assert main(["bench", "--engine", "llama", "--model", str(tiny_model_path), "--policy", "continuous",
                 "--agents", "2", "--lengths", "6,12", "--requests-per-agent", "2", "--fit", "--fit-widths", "1,2",
                 "--fit-steps", "6", "--fit-rounds", "2", "--n-ctx", "1024", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert runs == [1, 2, 1, 2, 2]
    fit, result = out["fit"], out["results"][0]
    ceiling = 2 / (fit["floor_ms"] + 2 * fit["per_row_ms"]) * 1e3
    # Prompt tokens and the narrower steps as requests end cost the run more than full decode steps.
    assert 0 < result["line_priced_tok_s"] < ceiling
    assert result["line_priced_tok_s"] <= result["line_bound_tok_s"] < ceiling
    # The run's own full-width decode steps beside the sweep's, median and mean.
    full = result["full_width_step_ms"]
    assert full["steps"] > 0 and full["median"] > 0 and full["mean"] > 0
    assert set(fit["mean_step_ms"]) == {"1", "2"}
