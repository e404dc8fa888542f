"""The gateway's admission policies: which queued agent's request goes to a backend next.

Remote engines batch continuously on their own and cannot switch policy, so the gateway admits
continuously too (a freed slot is refilled at once) and its policy is the order in which agents get
the freed slots. A request's `priority` (vLLM's meaning: lower goes first) outranks the policy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Protocol


class Queued(Protocol):
    seq: int
    priority: int


class AdmissionPolicy:
    name: str
    label: str

    def order(self, queues: Mapping[str, deque[Queued]], inflight: Mapping[str, int]) -> list[str]:
        """Agents with queued requests, the one to serve first first."""
        raise NotImplementedError


class FirstComeFirstServed(AdmissionPolicy):
    """Oldest request first, whoever sent it: an agent that floods the queue gets most slots."""

    name = "first-come"
    label = "first come, first served"

    def order(self, queues, inflight):
        return sorted(_waiting(queues), key=lambda a: (queues[a][0].priority, queues[a][0].seq))


class FewestInFlight(AdmissionPolicy):
    """The agent with the fewest requests in flight first, so one busy agent cannot starve the rest."""

    name = "fewest-in-flight"
    label = "fewest requests in flight first"

    def order(self, queues, inflight):
        return sorted(_waiting(queues),
                      key=lambda a: (queues[a][0].priority, inflight.get(a, 0), queues[a][0].seq))


def _waiting(queues: Mapping[str, deque[Queued]]) -> Iterable[str]:
    return (agent for agent, queue in queues.items() if queue)


ADMISSION_POLICIES: dict[str, type[AdmissionPolicy]] = {p.name: p for p in (FirstComeFirstServed, FewestInFlight)}


def make_admission_policy(name: str) -> AdmissionPolicy:
    try:
        return ADMISSION_POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown gateway policy {name!r}; choose one of {', '.join(ADMISSION_POLICIES)}") from None
