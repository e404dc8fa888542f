"""Priority: a request's own priority (the X-Agent-Priority header) or its agent's, lower first, as vLLM's `priority`.

Agents nobody named have priority 0; equal priorities are served first come first served. Under
KV pressure the lowest-priority lanes pause, KV resident.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarm_panel.runtime.policies.ranked import RankedPolicy

if TYPE_CHECKING:
    from swarm_panel.runtime.core.request import Request
    from swarm_panel.runtime.policies.policy import SchedulerView


class PriorityPolicy(RankedPolicy):
    name = "priority"
    label = "priority"
    summary = ("Continuous, serving lower priority numbers first: per request (X-Agent-Priority) or per agent "
               "(the agents table, PUT /v1/scheduler agent_priorities).")
    colour = "#ef8fb3"

    def rank(self, view: SchedulerView, request: Request) -> int:
        if request.priority is not None:
            return request.priority
        return view.config.agent_priorities.get(request.agent, 0)
