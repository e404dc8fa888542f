"""The scheduler's knobs, all of which may change at any step boundary."""

from __future__ import annotations

from dataclasses import dataclass, replace

POLICY_NAMES = ("naive", "shrinking", "continuous")
MAX_LANES = 256  # llama.cpp's llama_max_parallel_sequences()


@dataclass(slots=True, frozen=True)
class SchedulerConfig:
    policy: str = "continuous"
    max_batch: int = 8
    # Prompt tokens one step may carry beside its decode rows.
    prefill_chunk: int = 512
    # KV tokens the scheduler may hand out; None means all the engine has.
    kv_budget: int | None = None
    # A static batch starts with fewer than max_batch requests once the oldest has waited this long.
    admission_wait_s: float = 0.05
    # Finished sequences' KV stays resident and new prompts reuse their longest cached prefix;
    # turning it off drops the cache at the next step boundary.
    prefix_cache: bool = True

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
        if not 1 <= self.max_batch <= MAX_LANES:
            raise ValueError(f"max_batch must be within 1..{MAX_LANES}, got {self.max_batch}")
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
