"""Who got how much of the card against what an equal split would have given them.

An equal split is not 1/N of the tokens: an agent with one request open can use one row of a step
at most, so a work-conserving scheduler must hand the rows it cannot use to whoever still asks. The
reference here is the max-min fair split of each unit of service over the agents asking at that
moment (water-filling, each capped at its open requests, within the batch width). An agent served
at 1.0x its fair share got exactly the equal split; Jain's index over those ratios is 1 when every
agent did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping


def water_fill(capacity: float, demands: Mapping[str, float]) -> dict[str, float]:
    """Max-min fair split of `capacity` over the demands: the smallest demands are met in full first."""
    alloc: dict[str, float] = {}
    left = capacity
    pending = sorted((d, a) for a, d in demands.items() if d > 0)
    while pending:
        level = left / len(pending)
        demand, agent = pending[0]
        if demand > level:
            for _, rest in pending:
                alloc[rest] = level
            return alloc
        alloc[agent] = demand
        left -= demand
        pending.pop(0)
    return alloc


def jain_index(values: Iterable[float]) -> float | None:
    """(sum x)^2 / (n * sum x^2): 1 when all are equal, 1/n when one agent has everything."""
    xs = list(values)
    square = sum(x * x for x in xs)
    if not xs or square == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * square)


class ServiceLedger:
    """Tokens served per agent beside each agent's fair share of them, fed as service happens.

    `opened`/`closed` track each agent's open requests (its demand); `served` charges tokens and
    splits the same number over the agents asking, by water-filling within `lanes` rows.
    """

    def __init__(self, lanes: int | None = None) -> None:
        self.lanes = lanes
        self.open: Counter[str] = Counter()
        self.served_tokens: Counter[str] = Counter()
        self.fair_tokens: Counter[str] = Counter()
        self._shares: dict[str, float] | None = None

    def opened(self, agent: str) -> None:
        self.open[agent] += 1
        self._shares = None

    def closed(self, agent: str) -> None:
        self.open[agent] -= 1
        if self.open[agent] <= 0:
            del self.open[agent]
        self._shares = None

    def set_open(self, open_requests: Mapping[str, int]) -> None:
        """Replaces the demand at once (a poller that sees counts, not events)."""
        self.open = Counter({a: n for a, n in open_requests.items() if n > 0})
        self._shares = None

    def served(self, agent: str, tokens: float) -> None:
        self.served_many({agent: tokens})

    def served_many(self, tokens: Mapping[str, float]) -> None:
        total = sum(tokens.values())
        if total <= 0:
            return
        self.served_tokens.update(tokens)
        # Whoever was served was asking, even if its request closed before the poller looked.
        shares = self._fair_shares(extra=[a for a, n in tokens.items() if n > 0 and a not in self.open])
        for agent, share in shares.items():
            self.fair_tokens[agent] += total * share

    def _fair_shares(self, extra: list[str]) -> dict[str, float]:
        if self._shares is not None and not extra:
            return self._shares
        demands = dict(self.open) | {a: 1 for a in extra}
        total_open = sum(demands.values())
        capacity = min(self.lanes, total_open) if self.lanes else total_open
        alloc = water_fill(capacity, demands)
        total = sum(alloc.values())
        shares = {a: v / total for a, v in alloc.items()} if total else {}
        if not extra:
            self._shares = shares
        return shares

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return Counter(self.served_tokens), Counter(self.fair_tokens)


def fairness_figures(served: Mapping[str, float], fair: Mapping[str, float]) -> dict:
    """Shares of the tokens, each agent's service over its fair share, and Jain's index over those."""
    total = sum(served.values())
    agents = sorted(set(served) | set(fair))
    ratios = {a: served.get(a, 0.0) / fair[a] for a in agents if fair.get(a, 0.0) > 0}
    return {
        "tokens": {a: served.get(a, 0.0) for a in agents},
        "share": {a: served.get(a, 0.0) / total for a in agents} if total else {},
        "fair_ratio": ratios,
        "jain": jain_index(ratios.values()),
    }
