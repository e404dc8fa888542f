"""What would end if the panel quit now: launched coding agents, the built-in swarm's agents, requests in flight and a
model download. The close question names it; with none of it, closing quits at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunningWork:
    coding_agents: int = 0
    swarm_agents: int = 0
    requests: int = 0  # in flight over HTTP, from any client
    download: str = ""  # the model being downloaded

    def __bool__(self) -> bool:
        return bool(self.coding_agents or self.swarm_agents or self.requests or self.download)

    def describe(self) -> str:
        """"2 coding agents, 8 agents of the built-in swarm, 5 requests in flight and a download (NAME)"."""
        parts = []
        if self.coding_agents:
            parts.append(_count(self.coding_agents, "coding agent"))
        if self.swarm_agents:
            parts.append(f"{_count(self.swarm_agents, 'agent')} of the built-in swarm")
        if self.requests:
            parts.append(f"{_count(self.requests, 'request')} in flight")
        if self.download:
            parts.append(f"a download ({self.download})")
        if not parts:
            return "nothing"
        return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"
