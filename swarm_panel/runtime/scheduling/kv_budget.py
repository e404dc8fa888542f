"""The KV budget: how many KV tokens the scheduler may hand out, and live counters of what is held.

Lanes hold `used`: each occupied lane's computed tokens and padding rows, plus, on a hybrid model, a
fixed recurrent state per sequence (`state_tokens`). Finished sequences kept resident for prefix
reuse hold `cached`, read from the prefix cache's own counters (a parked one holds none). Every
change to what a lane holds goes through `allocate` and `free`, so a check costs the same however
many lanes there are; the lane table (runtime.scheduling.lanes) asserts at the end of each step that `used`
equals a fresh recount over its lanes.
"""

from __future__ import annotations

from swarm_panel.runtime.reuse.prefix_cache import PrefixCache


class KVBudget:
    def __init__(self, capacity: int, state_tokens: int, cache: PrefixCache) -> None:
        # What the engine holds; lowered when it ran out before the budget said it would.
        self.capacity = capacity
        # The config's kv_budget; None means all the engine has.
        self.limit: int | None = None
        self.state_tokens = state_tokens
        self.used = 0
        self._cache = cache

    @property
    def total(self) -> int:
        return self.capacity if self.limit is None else min(self.limit, self.capacity)

    @property
    def cached(self) -> int:
        return self._cache.num_tokens + self.state_tokens * self._cache.num_resident

    @property
    def free_tokens(self) -> int:
        return self.total - self.used - self.cached

    def can_admit(self, need: int, promised: int) -> bool:
        """Whether `need` more tokens fit beside what is held and what earlier admissions were promised."""
        return need <= self.free_tokens - promised

    def allocate(self, tokens: int) -> None:
        self.used += tokens

    def free(self, tokens: int) -> None:
        self.used -= tokens
