"""The scheduler's knobs, all of which may change at any step boundary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

MAX_PRIORITY = 1 << 20
MAX_LANES = 256  # llama.cpp's llama_max_parallel_sequences()


@dataclass(slots=True, frozen=True)
class SchedulerConfig:
    # A name from runtime.policies.registry; the scheduler checks it (scheduling.lanes.checked_config).
    policy: str = "continuous"
    num_lanes: int = 8
    # Prompt tokens one step may carry beside its decode rows.
    prefill_chunk: int = 256
    # KV tokens the scheduler may hand out; None means all the engine has.
    kv_budget: int | None = None
    # A static batch starts with fewer than num_lanes requests once the oldest has waited this long.
    admission_wait_s: float = 0.05
    # Finished sequences' KV stays resident and new prompts reuse their longest cached prefix;
    # turning it off drops the cache at the next step boundary.
    prefix_cache: bool = True
    # Per agent: fair share's weights (weight 2 is owed twice the service; unnamed agents 1) and the
    # priority policy's priorities (lower first, as vLLM's `priority`; unnamed agents 0).
    agent_weights: Mapping[str, float] = field(default_factory=dict)
    agent_priorities: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Read-only copies: a config is shared between threads and compared to detect changes.
        object.__setattr__(self, "agent_weights", MappingProxyType(dict(self.agent_weights)))
        object.__setattr__(self, "agent_priorities", MappingProxyType(dict(self.agent_priorities)))
        for agent, weight in self.agent_weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
                raise ValueError(f"the weight of agent {agent!r} must be a positive number, got {weight!r}")
        for agent, priority in self.agent_priorities.items():
            if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > MAX_PRIORITY:
                raise ValueError(f"the priority of agent {agent!r} must be an integer within +-{MAX_PRIORITY}, "
                                 f"got {priority!r}")
        if not 1 <= self.num_lanes <= MAX_LANES:
            raise ValueError(f"num_lanes must be within 1..{MAX_LANES}, got {self.num_lanes}")
        if self.prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be at least 1, got {self.prefill_chunk}")
        if self.kv_budget is not None and self.kv_budget < 1:
            raise ValueError(f"kv_budget must be at least 1 token, got {self.kv_budget}")
        if self.admission_wait_s < 0:
            raise ValueError(f"admission_wait_s must not be negative, got {self.admission_wait_s}")

    def with_changes(self, **changes: object) -> SchedulerConfig:
        unknown = set(changes) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown scheduler setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)


# Auto layout: split KV once each lane's share of n_ctx holds a conversation of this many tokens.
SPLIT_KV_MIN_LANE_TOKENS = 4096


def auto_kv_unified(n_ctx: int, lanes: int) -> bool:
    """The KV layout when none is asked for. Split streams attend over their own cells only, where a
    unified pool makes every token's attention walk every live sequence's cells (masked); the split
    layout keeps a prefix cache too (adoption in place, copies through host RAM), so it is chosen
    whenever each lane's fixed share is a useful context, and unified, which lets any one sequence
    fill the whole context, when the shares would be too small."""
    return n_ctx // max(lanes, 1) < SPLIT_KV_MIN_LANE_TOKENS
