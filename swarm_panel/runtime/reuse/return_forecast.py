"""When each agent is likely back: what the prefix cache evicts and parks by, rather than by age alone.

A coding agent's turn ends with a tool call; the agent is idle while its tool runs (a test suite, a
build, a file read) and then sends its next turn, which reuses the conversation the cache holds. An
agent's idle gaps so far (a reply's end to its next request) forecast its next one, so a cached
conversation's agent is expected back at `finished + gap`. The sequence to evict is the one whose agent
is expected furthest from now: one still busy with a long tool, or one long overdue (most likely done
with its session). An agent already back has a queued request, whose best match the prefix cache
keeps anyway (runtime.reuse.prefix_cache).

With no gaps seen yet every agent's gap is taken as 0, and the entry furthest from now is the one that
finished longest ago: least recently used, as before. Only ages and gaps are kept, a few floats an agent.
"""

from __future__ import annotations

import statistics

# Each new gap moves an agent's forecast halfway: a harness's tool times vary turn to turn.
GAP_WEIGHT = 0.5
# Agents remembered at most (the oldest go first); a long-running server meets many sessions.
MAX_AGENTS = 4096


class ReturnForecast:
    def __init__(self) -> None:
        # The scheduler's time at its latest call, which eviction measures distances from.
        self.now = 0.0
        self._gap: dict[str, float] = {}
        # When each agent with no request in the scheduler last had one.
        self._idle_since: dict[str, float] = {}

    def arrived(self, agent: str, now: float) -> None:
        """A request of this agent entered the scheduler."""
        self.now = now
        since = self._idle_since.pop(agent, None)
        if since is None:
            return
        gap = max(now - since, 0.0)
        previous = self._gap.pop(agent, None)
        self._gap[agent] = gap if previous is None else previous + GAP_WEIGHT * (gap - previous)
        if len(self._gap) > MAX_AGENTS:
            del self._gap[next(iter(self._gap))]

    def idle(self, agent: str, now: float) -> None:
        """The agent's last request in the scheduler left it (runtime.policies.agent_service counts them)."""
        self.now = now
        self._idle_since[agent] = now
        if len(self._idle_since) > MAX_AGENTS:
            del self._idle_since[next(iter(self._idle_since))]

    def gap(self, agent: str) -> float:
        """The agent's forecast idle gap: its own, else the median of the others', else 0."""
        own = self._gap.get(agent)
        if own is not None:
            return own
        return statistics.median(self._gap.values()) if self._gap else 0.0

    def distance(self, agent: str, finished: float | None, now: float) -> float:
        """How far from now the agent of a sequence that finished at `finished` is expected back; the
        larger, the better to evict."""
        expected = (finished if finished is not None else now) + self.gap(agent)
        return abs(expected - now)
