"""The swarm workload's flags, one definition for `bench` (in-process) and `swarm` (over HTTP): the same
agents, lengths, prompts and turns mean the same thing whichever way the swarm is driven."""

from __future__ import annotations

import argparse


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("lengths must be positive integers")
    return values


def add_workload_arguments(parser: argparse.ArgumentParser, *, lengths_default: tuple[int, ...] | None,
                           lengths_help: str) -> argparse._ArgumentGroup:
    """The workload's group; `swarm` leaves --lengths unset so its --preset decides."""
    group = parser.add_argument_group("workload")
    group.add_argument("--agents", type=int, default=8, help="agents in the swarm (1..256)")
    group.add_argument("--lengths", type=int_list, default=lengths_default, help=lengths_help)
    group.add_argument("--spread", type=float, default=1.0,
                       help="scale of the lengths' distance from their mean: 0 = all equal, 1 = as given")
    group.add_argument("--prompt-tokens", type=int, default=32,
                       help="prompt length of every request (with --turns: each agent's task, after the system prompt)")
    group.add_argument("--system-tokens", type=int, default=0,
                       help="a system prompt of this many tokens, shared by every agent, starts every prompt")
    group.add_argument("--turns", type=int, default=None,
                       help="multi-turn agents: each of T turns resends the whole conversation (system prompt, task, "
                            "every earlier reply and tool result); sets the requests per agent")
    group.add_argument("--tool-tokens", type=int, default=64, help="tool result appended after each reply (--turns)")
    group.add_argument("--real-agents", action="store_true",
                       help="real agents: multi-turn coding chats (shared system prompt, varied tasks, tool results) "
                            "that end when the model stops; --lengths, --spread and the token counts are unused")
    group.add_argument("--reply-tokens", type=int, default=256,
                       help="with --real-agents: most tokens one reply may take before it is cut off")
    return group
