"""The service each agent has had from the scheduler, kept whatever the policy so a switch loses nothing.

Two counters per agent, both in weighted tokens (a computed prompt token counts 1, an output token
2, as VTC weighs them: a decode row costs a step's share, a prompt token a fraction of one):
- `attained`: everything the agent's session has received, the rank least-attained-service uses;
- `virtual`: VTC's counter, the same tokens divided by the agent's weight, and lifted to the least
  counter among agents with work in the scheduler whenever an agent comes back from idle, so an
  agent cannot bank service while away and then take the card.

Written by the engine thread; /metrics reads `snapshot()` from another, hence the lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from swarm_panel.runtime.core.engine import RowKind, StepResult
from swarm_panel.runtime.core.request import Request

PROMPT_WEIGHT = 1.0
OUTPUT_WEIGHT = 2.0


@dataclass(slots=True, frozen=True)
class AgentTotals:
    agent: str
    prompt_tokens: int
    output_tokens: int
    attained: float


class AgentService:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attained: Counter[str] = Counter()
        self.virtual: Counter[str] = Counter()
        self._prompt: Counter[str] = Counter()
        self._output: Counter[str] = Counter()
        # Requests in the scheduler (waiting or in a lane), by id, with the agent that sent them.
        self._open: dict[int, str] = {}
        self._open_per_agent: Counter[str] = Counter()

    def arrived(self, request: Request) -> None:
        agent = request.agent
        if not self._open_per_agent[agent]:
            busy = [self.virtual[a] for a, n in self._open_per_agent.items() if n and a != agent]
            if busy:
                self.virtual[agent] = max(self.virtual[agent], min(busy))
        self._open[request.request_id] = agent
        self._open_per_agent[agent] += 1

    def left(self, request: Request) -> bool:
        """A request left the scheduler; says whether its agent has none left there (it is idle now)."""
        agent = self._open.pop(request.request_id, None)
        if agent is None:
            return False
        self._open_per_agent[agent] -= 1
        return not self._open_per_agent[agent]

    def record_step(self, rows, result: StepResult, weights: Mapping[str, float]) -> None:
        """Charges each row the step computed to its agent."""
        with self._lock:
            for row in rows:
                request_id = row.request.request_id
                if row.kind is RowKind.PADDING or request_id in result.refused or request_id in result.errors:
                    continue
                agent = row.request.agent
                charge = 0.0
                if row.kind is RowKind.PREFILL:
                    self._prompt[agent] += len(row.tokens)
                    charge += PROMPT_WEIGHT * len(row.tokens)
                if row.sample and request_id in result.samples:
                    self._output[agent] += 1
                    charge += OUTPUT_WEIGHT
                self.attained[agent] += charge
                self.virtual[agent] += charge / weights.get(agent, 1.0)

    def snapshot(self) -> list[AgentTotals]:
        with self._lock:
            totals = [AgentTotals(a, self._prompt[a], self._output[a], self.attained[a])
                      for a in set(self._prompt) | set(self._output)]
        # Sorted outside the lock, which the engine thread takes every step.
        return sorted(totals, key=lambda t: t.agent)
