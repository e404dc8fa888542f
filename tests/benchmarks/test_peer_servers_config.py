"""benchmarks/peer_servers.py: what load each round gets (the servers themselves need llama-server)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.peer_servers import SCALED_LENGTHS, parse_args, selected, server_commands, swarm_config, variant
from benchmarks.peer_workloads import harness_head


def _args(**given) -> argparse.Namespace:
    defaults = {"agents": 8, "seconds": 60.0, "turns": None, "real_agents": False, "reply_tokens": 256,
                "system_tokens": 0, "tool_tokens": 64, "lengths": SCALED_LENGTHS, "prompt_tokens": 32,
                "requests": None, "long_prompt_tokens": 0, "head": None, "tool_seconds": (0.0, 0.0),
                "round_limit": None}
    return argparse.Namespace(**(defaults | given))


def test_real_agents_with_turns_run_every_chat_to_its_end():
    config = swarm_config(_args(real_agents=True, turns=4), "http://127.0.0.1:1", ())
    assert config.seconds is None
    assert config.requests_per_agent == 4 and config.real_agents


def test_real_agents_without_turns_run_for_the_window():
    config = swarm_config(_args(real_agents=True), "http://127.0.0.1:1", ())
    assert config.seconds == 60.0 and config.requests_per_agent is None


def test_fixed_lengths_suppress_the_end_of_generation_tokens():
    config = swarm_config(_args(), "http://127.0.0.1:1", (2, 7))
    assert config.seconds == 60.0 and config.eos_token_ids == (2, 7) and config.lengths == SCALED_LENGTHS


def test_conversations_with_a_system_prompt_run_to_their_end():
    config = swarm_config(_args(turns=6, system_tokens=300, tool_tokens=20), "http://127.0.0.1:1", ())
    assert config.seconds is None and config.requests_per_agent == 6
    assert config.system_tokens == 300 and config.tool_tokens == 20


def test_a_round_limit_cuts_conversations_that_otherwise_run_to_their_end():
    config = swarm_config(_args(turns=6, round_limit=240.0), "http://127.0.0.1:1", ())
    assert config.seconds == 240.0 and config.requests_per_agent == 6
    config = swarm_config(_args(requests=8, round_limit=90.0), "http://127.0.0.1:1", ())
    assert config.seconds == 90.0 and config.requests_per_agent == 8
    assert parse_args(["--only", "swarm-panel", "--workload", "hybrid-agents", "--round-limit", "240"]).round_limit == 240


def test_fixed_lengths_with_requests_run_each_agents_requests_to_their_end():
    config = swarm_config(_args(requests=8), "http://127.0.0.1:1", (2,))
    assert config.seconds is None and config.requests_per_agent == 8
    # Lengths cycle per agent: 8 requests give every agent each length once.
    workload = config.workload
    assert sorted(workload.max_tokens(3, turn) for turn in range(8)) == sorted(SCALED_LENGTHS)


def test_one_agent_can_send_long_prompts_beside_the_fixed_lengths():
    config = swarm_config(_args(long_prompt_tokens=500), "http://127.0.0.1:1", (2,))
    assert config.long_prompt_tokens == 500 and config.prompt_tokens == 32 and config.seconds == 60.0


def test_a_variant_runs_the_same_serve_command_with_its_flags(tmp_path):
    args = _args(llama_server=tmp_path / "llama-server", threads=None, n_ctx=32768, ours_arg=[], peer_arg=[],
                 checkout=[], peer_fa_off=False, ours_variant=[variant("unified=--kv-unified --cache-slots 4")],
                 lanes=8)
    commands = server_commands(args, tmp_path / "m.gguf", 8080)
    assert commands["swarm-panel-unified"] == [*commands["swarm-panel"], "--kv-unified", "--cache-slots", "4"]


def test_a_swarm_larger_than_its_lanes_gives_every_server_that_many_lanes(tmp_path):
    args = _args(llama_server=tmp_path / "llama-server", threads=None, n_ctx=32768, ours_arg=[], peer_arg=[],
                 checkout=[], peer_fa_off=False, ours_variant=[], agents=16, lanes=8)
    commands = server_commands(args, tmp_path / "m.gguf", 8080)
    ours, peer = commands["swarm-panel"], commands["llama-server"]
    assert ours[ours.index("--num-lanes") + 1] == "8" and peer[peer.index("-np") + 1] == "8"


def test_a_variant_needs_a_name_and_flags():
    with pytest.raises(argparse.ArgumentTypeError):
        variant("--kv-unified")


def test_only_keeps_the_variants_of_the_servers_it_names():
    names = ["swarm-panel", "llama-server", "swarm-panel@old", "swarm-panel-fa", "llama-server-fa-off",
             "llama_cpp.server"]
    assert selected(names, ["swarm-panel", "llama-server"]) == names[:5]
    assert selected(names, ["llama-server"]) == ["llama-server", "llama-server-fa-off"]
    assert selected(names, ["swarm-panel-fa"]) == ["swarm-panel-fa"]
    assert selected(names, None) == names


def test_a_named_workload_sets_the_defaults_and_a_given_flag_still_wins():
    args = parse_args(["--workload", "past-lanes", "--only", "swarm-panel"])
    assert (args.agents, args.lanes, args.turns, args.tool_seconds) == (24, 8, 6, (0.5, 5.0))
    args = parse_args(["--workload", "past-lanes", "--only", "swarm-panel", "--agents", "16", "--tool-seconds", "1,2"])
    assert (args.agents, args.lanes, args.tool_seconds) == (16, 8, (1.0, 2.0))
    assert parse_args(["--workload", "hybrid-agents", "--only", "swarm-panel"]).model_kind == "qwen35"
    with pytest.raises(SystemExit):
        parse_args(["--workload", "hybrid-agents"])  # llama-server in the rotation needs its binary


def test_sub_agents_share_the_harness_head_and_tools_take_their_time():
    config = swarm_config(_args(turns=2, head="HEAD", tool_seconds=(0.5, 5.0)), "http://127.0.0.1:1", ())
    assert config.system_prompt == "HEAD" and config.tool_seconds == (0.5, 5.0) and config.turns == 2


def test_a_harness_head_is_its_system_prompt_and_tools_without_claude_codes_billing_block():
    head = harness_head("claude-code")
    assert head.startswith("You are a Claude agent") and "x-anthropic-billing-header" not in head
    assert '"name":"Read"' in head and len(head) > 60_000
    qwen = harness_head("qwen-code")
    assert '"name":"read_file"' in qwen and qwen.index("# Tools") > 1_000
    with pytest.raises(ValueError, match="no captured first turn"):
        harness_head("aider-nope")
