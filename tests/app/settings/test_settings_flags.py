"""Settings is the one definition of a field: every command's flag, variable and config key comes from it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from swarm_panel.app.settings.fields import choices, field_spec
from swarm_panel.app.settings.schema import SCHEDULER_FIELDS, Settings, scheduler_values
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.ui.shell.cli import build_parser

# Every spelling the README, the tests and the benchmarks use.
SERVE_SPELLINGS = {
    "--host": "127.0.0.1", "--port": "0", "--api-key": "k", "--cors-origin": "http://a", "--engine": "modeled",
    "--model": "demo", "--profile": "rx9070xt-qwen3.5-9b", "--policy": "shrinking", "--num-lanes": "4",
    "--prefill-chunk": "64", "--kv-budget": "4096", "--admission-wait": "0.5", "--n-ctx": "1024",
    "--n-batch": "128", "--n-gpu-layers": "-1", "--kv-type": "q8_0", "--flash-attn": "on", "--threads": "2",
    "--checkpoint-budget-mb": "8", "--extra-buffers": "off", "--max-waiting": "9", "--max-body-bytes": "2048",
    "--max-prompt-chars": "100", "--kv-narrow-after-s": "60",
}
# HTTP clients of an endpoint: their --api-key and --model are what they send, not the server's settings.
CLIENT_COMMANDS = ("swarm", "chaos")
SWITCHES = ("--no-prefix-cache", "--no-kv-unified", "--insecure-public-without-api-key")


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def test_no_command_redeclares_a_settings_field():
    """Each flag that sets a field carries the field's help and choices; a hand-made copy would not."""
    checked = 0
    for command, parser in subcommands().items():
        if command in CLIENT_COMMANDS:
            continue
        for action in parser._actions:
            if action.dest not in Settings.model_fields or action.dest == "policy" and command == "bench":
                continue
            spec = field_spec(action.dest)
            assert action.help.startswith(spec.help.replace("%", "%%")), (command, action.option_strings)
            if spec.choices is not None and spec.kind is not bool:
                assert tuple(action.choices) == spec.choices, (command, action.dest)
            checked += 1
    assert checked > 40


def test_serve_takes_every_old_spelling_and_a_left_out_flag_leaves_the_layers_below():
    from swarm_panel.app.cli.serve import settings_from_args

    argv = ["serve", *[x for flag, value in SERVE_SPELLINGS.items() for x in (flag, value)], *SWITCHES]
    s = settings_from_args(build_parser().parse_args(argv))
    assert (s.port, s.policy, s.num_lanes, s.prefill_chunk, s.kv_budget, s.admission_wait_s) == (
        0, "shrinking", 4, 64, 4096, 0.5)
    assert (s.prefix_cache, s.kv_unified, s.insecure_public_without_api_key) == (False, False, True)
    assert (s.n_gpu_layers, s.kv_type, s.flash_attn, s.threads, s.cors_origins) == (-1, "q8_0", "on", 2, ["http://a"])
    assert vars(build_parser().parse_args(["serve"])).keys() == {"verbose", "command", "run"}


def test_flags_override_variables_which_override_the_config_file(monkeypatch, tmp_path):
    from swarm_panel.app.cli.serve import settings_from_args

    config = tmp_path / "config.toml"
    config.write_text("prefix_cache = false\nnum_lanes = 5\nn_ctx = 2048\npolicy = 'naive'\n")
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(config))
    monkeypatch.setenv("SWARM_PANEL_NUM_LANES", "6")
    s = settings_from_args(build_parser().parse_args(["serve", "--prefix-cache", "--policy", "las"]))
    assert (s.prefix_cache, s.num_lanes, s.n_ctx, s.policy) == (True, 6, 2048, "las")
    assert field_spec("num_lanes").env_var == "SWARM_PANEL_NUM_LANES"


def test_choices_come_from_the_policy_registry_and_the_field_types():
    assert choices("policy") == POLICY_NAMES
    serve = subcommands()["serve"]
    policy = next(a for a in serve._actions if a.dest == "policy")
    assert tuple(policy.choices) == POLICY_NAMES
    gui = subcommands()["gui"]
    assert tuple(next(a for a in gui._actions if a.dest == "policy").choices) == POLICY_NAMES


def test_bench_takes_the_settings_defaults_but_its_documented_own():
    args = build_parser().parse_args(["bench"])
    assert args.prefill_chunk == Settings.model_fields["prefill_chunk"].default == 256
    assert (args.prefix_cache, args.n_ctx, args.kv_unified, args.threads) == (True, 32768, None, None)
    assert (args.engine, args.num_lanes) == ("modeled", None)  # the article's card; lanes follow the swarm


def test_bench_checks_the_bounds_itself(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--num-lanes", "0"])
    assert "--num-lanes: '0': must be within 1 to 256" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--n-ctx", "lots"])
    assert "'lots': expected int" in capsys.readouterr().err


def test_the_gateway_keeps_its_own_spellings_and_reads_backends_from_flags():
    from swarm_panel.app.cli.gateway import settings_from_args

    args = build_parser().parse_args(["gateway", "--backend", "vllm=http://a:8000", "--backend", "http://b:1 weight=2",
                                      "--policy", "fewest-in-flight", "--routing", "round-robin", "--port", "0"])
    s = settings_from_args(args)
    assert (s.gateway_policy, s.gateway_routing, s.port) == ("fewest-in-flight", "round-robin", 0)
    assert [(b.kind, b.weight) for b in s.backends] == [("vllm", 1.0), ("auto", 2.0)]


def test_gui_flags_reach_run_gui_by_field_name(monkeypatch):
    import swarm_panel.ui.shell.app_main

    seen = {}
    monkeypatch.setattr(swarm_panel.ui.shell.app_main, "run_gui", lambda **kw: seen.update(kw) or 0)
    args = build_parser().parse_args(["gui", "--engine", "modeled", "--port", "0", "--policy", "fair", "--swarm", "3"])
    assert args.run(args) == 0
    assert (seen["engine"], seen["port"], seen["policy"], seen["swarm"]) == ("modeled", 0, "fair", 3)
    assert "model" not in seen  # left out: what the panel remembers, the variables and the config file decide


def test_the_scheduler_fields_are_every_knob_but_the_agent_maps():
    per_agent = {"agent_weights", "agent_priorities"}
    assert set(SCHEDULER_FIELDS) == {f.name for f in dataclasses.fields(SchedulerConfig)} - per_agent
    s = Settings(prefix_cache=False, prefill_chunk=64, admission_wait_s=0.2)
    running = SchedulerConfig(agent_priorities={"a": 1})
    config = s.scheduler_config(running)
    assert (config.prefix_cache, config.prefill_chunk, dict(config.agent_priorities)) == (False, 64, {"a": 1})
    assert s.with_scheduler(config.with_changes(policy="naive")).policy == "naive"
    assert scheduler_values(config)["admission_wait_s"] == 0.2
