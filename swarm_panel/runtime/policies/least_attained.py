"""Agent least-attained-service: Autellix's program-level LAS (PLAS, 2025) with an agent's session as the program.

Every call is ranked by the service its whole agent session has received so far (weighted tokens,
swarm_panel.runtime.policies.policy.AgentService), least first: a coordinator and its workers, which ask for little at a
time, go ahead of an agent that has been served a lot, so the swarm's critical path is not queued
behind a flood. When the KV left cannot carry every lane, the most-served agents' lanes pause
(their KV stays resident) rather than anyone being recomputed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_panel.runtime.policies.ranked import RankedPolicy

if TYPE_CHECKING:
    from swarm_panel.runtime.core.request import Request
    from swarm_panel.runtime.policies.policy import SchedulerView


class LeastAttainedServicePolicy(RankedPolicy):
    name = "las"
    label = "least attained service"
    summary = ("Continuous, serving the agent session that has received the least service first (Autellix's "
               "PLAS): shortens a coordinator's critical path; heavy agents pause under KV pressure.")
    colour = "#b39ddb"

    def rank(self, view: SchedulerView, request: Request) -> float:
        return view.attained(request.agent)
