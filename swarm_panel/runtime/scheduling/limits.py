"""What can ever run here, checked in one place: a config the engine holds, a request its context and budget hold."""

from __future__ import annotations

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.runtime.core.engine import EngineCaps
from swarm_panel.runtime.core.request import Request


class RequestRejected(ValueError):
    """The request can never run here (it would not fit the context or the KV budget)."""


def checked_config(config: SchedulerConfig, caps: EngineCaps) -> SchedulerConfig:
    """The config itself checks its own bounds; this adds the policy's name and what depends on the engine."""
    if config.policy not in POLICY_NAMES:
        raise ValueError(f"unknown policy {config.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    if config.max_batch > caps.max_lanes:
        raise ValueError(f"max_batch {config.max_batch} exceeds the engine's {caps.max_lanes} lanes")
    return config


def check_fits(num_prompt_tokens: int, max_tokens: int, caps: EngineCaps, kv_budget: int) -> None:
    total = num_prompt_tokens + max_tokens
    if total > caps.max_context:
        raise RequestRejected(
            f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {total} tokens, "
            f"more than the context of {caps.max_context}"
        )
    state_tokens = caps.sequence_state_tokens
    if total + state_tokens > kv_budget:
        state = f" and a recurrent state worth {state_tokens}" if state_tokens else ""
        raise RequestRejected(
            f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) needs {total} KV tokens{state}, "
            f"more than the KV budget of {kv_budget}"
        )


def unfit_after_change(request: Request, caps: EngineCaps, kv_budget: int) -> str | None:
    """Why a request already in the scheduler no longer fits a lowered budget; None when it still does."""
    budget = min(kv_budget, caps.max_context)
    if request.max_total_tokens > budget:
        return f"request needs {request.max_total_tokens} KV tokens, more than the new budget of {budget}"
    return None
