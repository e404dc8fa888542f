"""Every scheduling policy by name: a new policy is one file and one line here."""

from __future__ import annotations

from swarm_panel.runtime.core.fit import StepLine
from swarm_panel.runtime.policies.fair_share import FairSharePolicy
from swarm_panel.runtime.policies.least_attained import LeastAttainedServicePolicy
from swarm_panel.runtime.policies.policy import ContinuousPolicy, NaiveStaticPolicy, Policy, ShrinkingStaticPolicy
from swarm_panel.runtime.policies.priority import PriorityPolicy

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


def predicted_tok_s(policy: str, lengths_by_round: list[list[int]], line: StepLine) -> float:
    """What a step line says a policy yields when each round puts one request per lane together;
    each policy carries its own arithmetic (Policy.predicted_tok_s)."""
    return POLICIES[policy].predicted_tok_s(lengths_by_round, line)
