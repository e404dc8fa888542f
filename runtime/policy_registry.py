"""Every scheduling policy by name: a new policy is one file and one line here."""

from __future__ import annotations

from runtime.policies import ContinuousPolicy, NaiveStaticPolicy, Policy, ShrinkingStaticPolicy
from runtime.policy_fair_share import FairSharePolicy
from runtime.policy_las import LeastAttainedServicePolicy
from runtime.policy_priority import PriorityPolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p
    for p in (NaiveStaticPolicy, ShrinkingStaticPolicy, ContinuousPolicy, FairSharePolicy,
              LeastAttainedServicePolicy, PriorityPolicy)
}
POLICY_NAMES = tuple(POLICIES)
# The seed's argument (how lanes fill) and the orders over agents built on continuous batching.
BATCHING_POLICY_NAMES = tuple(n for n, p in POLICIES.items() if p.family == "batching")
AGENT_POLICY_NAMES = tuple(n for n, p in POLICIES.items() if p.family == "agent")


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
