"""Agent fair share: VTC ("Fairness in Serving Large Language Models", OSDI 2024) with agents as clients.

Each agent's virtual counter (runtime.policies.policy.AgentService) counts the weighted tokens it has been served,
divided by its weight; the agent with the least counter goes first, for free lanes, the prefill
budget and (under KV pressure) which lanes compute. Work-conserving: a lane nobody else asks for
still goes to whoever asks.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from typing import TYPE_CHECKING

from swarm_panel.runtime.policies.policy import OUTPUT_WEIGHT, PROMPT_WEIGHT, SchedulerView
from swarm_panel.runtime.policies.ranked import RankedPolicy

if TYPE_CHECKING:
    from swarm_panel.runtime.core.request import Request


class FairSharePolicy(RankedPolicy):
    name = "fair"
    label = "agent fair share"
    summary = ("Continuous, serving the agent with the least weighted service first (VTC counters per agent): "
               "one agent flooding requests cannot take the card.")
    colour = "#5aa9e6"

    def rank(self, view: SchedulerView, request: Request) -> float:
        return view.virtual(request.agent)

    def queue_order(self, view: SchedulerView, waiting: list[Request]) -> list[Request]:
        """Least counter first, each admission raising its agent's counter by what the request may cost.

        The projection only orders this one pass (the real counters move as tokens are served), so an
        agent with twenty queued requests is interleaved with the others by weight, not served twenty in a row.
        """
        queues: dict[str, deque[Request]] = defaultdict(deque)
        for request in waiting:
            queues[request.agent].append(request)
        weights = view.config.agent_weights
        heap = [(self.rank(view, q[0]), k, agent) for k, (agent, q) in enumerate(queues.items())]
        heapq.heapify(heap)
        ordered = []
        while heap:
            counter, k, agent = heapq.heappop(heap)
            request = queues[agent].popleft()
            ordered.append(request)
            if queues[agent]:
                cost = PROMPT_WEIGHT * request.num_tokens + OUTPUT_WEIGHT * request.sampling.max_tokens
                heapq.heappush(heap, (counter + cost / weights.get(agent, 1.0), k, agent))
        return ordered
