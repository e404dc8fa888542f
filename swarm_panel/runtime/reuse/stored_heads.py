"""Where stored prefixes (runtime.core.prefix_store) meet prompts: which one a prompt may start from, and
where a prompt chunk should end so that its head is stored.

The prefix planner (runtime.scheduling.prefix_planner) asks both: a stored prefix is the third place a
prompt's prefix can come from, after live and cached sequences, and wins only where it holds more.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from swarm_panel.runtime.core.prefix_store import PrefixStore
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.reuse.prefix_cache import MIN_MATCH_TOKENS, Match, as_tokens, common_prefix_len
from swarm_panel.runtime.reuse.resume import head_ends, turn_end_array


class StoredHeads:
    def __init__(self, store: PrefixStore, turn_end_tokens: frozenset[int]) -> None:
        self.store = store
        self._turn_ends = turn_end_array(turn_end_tokens)

    def longest(self, tokens: np.ndarray, limit: int, resume: Callable[[int, int], int] | None) -> Match | None:
        """The stored prefix sharing the most of `tokens` (at most `limit`), compared token by token.

        A restore copies the whole stored state and cuts it back, so a prefix is offered only where at
        least half of it is used; `resume(n, held)` cuts a match back to where a hybrid can resume."""
        best: Match | None = None
        for entry in self.store:
            n = min(common_prefix_len(tokens, entry.tokens), limit)
            if resume is not None and n >= MIN_MATCH_TOKENS:
                n = resume(n, entry.num_tokens)
            if n >= MIN_MATCH_TOKENS and 2 * n >= entry.num_tokens and (best is None or n > best.num_tokens):
                best = Match(entry, n)
        return best

    def store_at(self, request: Request, start: int, end: int) -> int | None:
        """The end of the prompt's head where a chunk over [start, end) should stop so that the engine
        stores it: a head of at least the store's min_tokens, not stored yet; None where there is none."""
        for boundary in head_ends(request, self._turn_ends):
            if (start < boundary <= end and boundary >= self.store.min_tokens
                    and not self.store.has(as_tokens(request.token_ids[:boundary]))):
                return boundary
        return None
