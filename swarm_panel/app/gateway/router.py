"""Which backend serves a request: cache affinity by agent and system prompt, or plain round-robin.

Cache-aware routing wins only where the KV of a request's prefix already is: an agent's next turn
resends its whole conversation, which only the backend that ran its last turn holds. So an agent
stays on its backend, a new agent goes where its system prompt is already cached, and either moves
only when that backend is much busier (by OVERRIDE_LOAD of its slots) than the least loaded one.
A request naming a stored response (`previous_response_id`) goes where that response is, whatever
the routing and the loads: no other backend can continue it (ResponseHomes).
"""

from __future__ import annotations

import logging
from collections import OrderedDict, defaultdict
from dataclasses import dataclass

from swarm_panel.app.gateway.backend_poller import Backend

log = logging.getLogger(__name__)

OVERRIDE_LOAD = 0.5
# Ids are about 40 bytes: this many cost a few MB, and outnumber what backends' stores keep.
MAX_RESPONSE_HOMES = 100_000


@dataclass(slots=True, frozen=True)
class RouteKey:
    agent: str
    prefix: str  # hash of the system prompt ("" when there is none)


def _score(backend: Backend) -> float:
    return backend.load() / backend.config.weight


class AffinityRouter:
    name = "affinity"

    def __init__(self, override_load: float = OVERRIDE_LOAD) -> None:
        self.override_load = override_load
        self.homes: dict[RouteKey, str] = {}
        self.prefix_homes: dict[str, set[str]] = defaultdict(set)
        self.moves = 0

    def choose(self, key: RouteKey, backends: list[Backend]) -> Backend | None:
        up = [b for b in backends if b.available]
        if not up:
            return None
        # Ties (an idle fleet) go to the backend with the fewest agents, so new agents spread out.
        lightest = min(up, key=lambda b: (_score(b), self.agents_on(b.label) / b.config.weight))
        home = next((b for b in up if b.label == self.homes.get(key)), None)
        if home is not None and home.load() - lightest.load() <= self.override_load:
            return home
        holders = [b for b in up if b.label in self.prefix_homes.get(key.prefix, ())]
        if holders:
            best = min(holders, key=_score)
            if best.load() - lightest.load() <= self.override_load:
                return best
        return lightest

    def placed(self, key: RouteKey, backend: Backend) -> None:
        previous = self.homes.get(key)
        if previous is not None and previous != backend.label:
            self.moves += 1
            log.info("agent %s moves from %s to %s", key.agent, previous, backend.label)
        self.homes[key] = backend.label
        self.prefix_homes[key.prefix].add(backend.label)

    def forget(self, label: str) -> None:
        """A backend went down: its agents move (counted now), and its cache is gone when it returns."""
        kept = {k: v for k, v in self.homes.items() if v != label}
        self.moves += len({k.agent for k in self.homes} - {k.agent for k in kept})
        self.homes = kept
        for holders in self.prefix_homes.values():
            holders.discard(label)

    def agents_on(self, label: str) -> int:
        return len({k.agent for k, v in self.homes.items() if v == label})


class RoundRobinRouter:
    """Every request to the next backend in turn: the baseline cache affinity is measured against."""

    name = "round-robin"

    def __init__(self) -> None:
        self.turn = 0
        self.homes: dict[RouteKey, str] = {}
        self.moves = 0

    def choose(self, key: RouteKey, backends: list[Backend]) -> Backend | None:
        up = [b for b in backends if b.available]
        if not up:
            return None
        return up[self.turn % len(up)]

    def placed(self, key: RouteKey, backend: Backend) -> None:
        self.turn += 1
        self.homes[key] = backend.label

    def forget(self, label: str) -> None:
        self.homes = {k: v for k, v in self.homes.items() if v != label}

    def agents_on(self, label: str) -> int:
        return len({k.agent for k, v in self.homes.items() if v == label})


class ResponseHomes:
    """The backend that answered each Responses API response the gateway relayed; the oldest go past a count."""

    def __init__(self, limit: int = MAX_RESPONSE_HOMES) -> None:
        self.limit = limit
        self._homes: OrderedDict[str, str] = OrderedDict()

    def note(self, response_id: str, label: str) -> None:
        self._homes[response_id] = label
        self._homes.move_to_end(response_id)
        while len(self._homes) > self.limit:
            self._homes.popitem(last=False)

    def home(self, response_id: str) -> str | None:
        return self._homes.get(response_id)


ROUTERS = {r.name: r for r in (AffinityRouter, RoundRobinRouter)}


def make_router(name: str) -> AffinityRouter | RoundRobinRouter:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown routing {name!r}; choose one of {', '.join(ROUTERS)}") from None
