"""The record every step leaves behind (built by runtime.scheduling.step), for plots, metrics and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field

# One character per lane in StepStats.lanes: what that lane did in the step.
LANE_DECODE = "D"
LANE_PREFILL = "P"
LANE_PADDING = "x"
LANE_STALLED = "."  # holds a request that got no row this step (prefill budget or KV spent)
LANE_EMPTY = " "


@dataclass(slots=True)
class StepStats:
    index: int
    time: float  # clock time at the end of the step
    duration: float
    policy: str
    num_lanes: int
    width_held: int  # occupied lanes: live plus padding
    live_lanes: int
    padding_lanes: int
    decode_rows: int
    prefill_rows: int
    prefill_tokens: int
    useful_tokens: int  # output tokens this step produced
    queue_depth: int
    kv_used: int
    kv_capacity: int
    finished: int
    lanes: str = ""
    # (agent, seconds) samples for latency figures.
    ttft: list[tuple[str, float]] = field(default_factory=list)
    itl: list[tuple[str, float]] = field(default_factory=list)
    e2e: list[tuple[str, float]] = field(default_factory=list)
    # KV tokens held by finished sequences kept for prefix reuse (idle, evictable; not in kv_used).
    kv_cached: int = 0
    cached_sequences: int = 0
    # Prompt tokens looked up in the prefix cache this step, and how many of them were reused.
    prefix_queries: int = 0
    prefix_hits: int = 0
    # (agent, queried, reused) for each agent looked up this step.
    prefix_agents: list[tuple[str, int, int]] = field(default_factory=list)
    # Recurrent-state checkpoints a hybrid model's engine holds (a memory budget of their own, outside the KV).
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    checkpoint_budget_bytes: int = 0
    # Finished sequences parked in host RAM (runtime.reuse.saved_states), in a budget of their own.
    parked_sequences: int = 0
    parked_bytes: int = 0
    park_budget_bytes: int = 0

    @property
    def useful_rows(self) -> int:
        return self.decode_rows + self.prefill_rows

    @property
    def utilization(self) -> float:
        return self.useful_rows / self.width_held if self.width_held else 0.0
