"""The closed-loop agent swarm: who asks for how many tokens, turn after turn."""

from __future__ import annotations

from dataclasses import dataclass

FILLER = (
    "Read the failing test, find the function it calls, explain the bug and propose a minimal patch. "
    "Keep the public interface unchanged and list the files you would touch. "
)

# The seed article's eight agents: a tool-call check up to a long refactor plan.
ARTICLE_LENGTHS = (40, 90, 150, 220, 300, 480, 650, 900)


@dataclass(slots=True, frozen=True)
class SwarmWorkload:
    agents: int = 8
    lengths: tuple[int, ...] = ARTICLE_LENGTHS
    requests_per_agent: int = 8
    prompt_tokens: int = 32
    # Scales each length's distance from the mean: 0 makes every output equal, 2 doubles the variance's root.
    spread: float = 1.0

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ValueError("agents must be at least 1")
        if not self.lengths or min(self.lengths) < 1:
            raise ValueError("lengths must be a non-empty list of positive token counts")
        if self.requests_per_agent < 1:
            raise ValueError("requests_per_agent must be at least 1")
        if self.prompt_tokens < 1:
            raise ValueError("prompt_tokens must be at least 1")
        if self.spread < 0:
            raise ValueError("spread must not be negative")

    @property
    def effective_lengths(self) -> list[int]:
        mean = sum(self.lengths) / len(self.lengths)
        return [max(1, round(mean + self.spread * (n - mean))) for n in self.lengths]

    def max_tokens(self, agent: int, turn: int) -> int:
        """Lengths cycle through the list, offset by agent, so every round holds the whole spread."""
        lengths = self.effective_lengths
        return lengths[(agent + turn) % len(lengths)]

    @property
    def total_output_tokens(self) -> int:
        return sum(
            self.max_tokens(agent, turn) for agent in range(self.agents) for turn in range(self.requests_per_agent)
        )


def agent_name(index: int) -> str:
    return f"agent-{index + 1:02d}"


def prompt_text(agent: int, turn: int, approx_tokens: int) -> str:
    head = f"Agent {agent + 1}, turn {turn + 1}. "
    # About four characters a token in English text.
    want = max(approx_tokens * 4 - len(head), 0)
    body = (FILLER * (want // len(FILLER) + 1))[:want]
    return head + body
