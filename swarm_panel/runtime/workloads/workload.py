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
    # A system prompt of this many tokens, the same for every agent, starts every prompt.
    system_tokens: int = 0
    # Multi-turn agents: each turn's prompt is the agent's whole conversation so far (system prompt,
    # its task of prompt_tokens, then every earlier reply and the tool result that followed it).
    conversation: bool = False
    # Length of the tool result appended after each reply in a conversation.
    tool_tokens: int = 64
    # Real agents (runtime.workloads.agent_script): chat conversations the model ends with its own stop token,
    # capped at reply_tokens; lengths, spread, prompt, system and tool tokens are then unused.
    real_agents: bool = False
    reply_tokens: int = 256

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
        if self.system_tokens < 0 or self.tool_tokens < 0:
            raise ValueError("system_tokens and tool_tokens must not be negative")
        if self.reply_tokens < 1:
            raise ValueError("reply_tokens must be at least 1")

    @property
    def effective_lengths(self) -> list[int]:
        mean = sum(self.lengths) / len(self.lengths)
        return [max(1, round(mean + self.spread * (n - mean))) for n in self.lengths]

    def max_tokens(self, agent: int, turn: int) -> int:
        """Lengths cycle through the list, offset by agent, so every round holds the whole spread."""
        lengths = self.effective_lengths
        return lengths[(agent + turn) % len(lengths)]

    @property
    def mean_decode_context(self) -> float:
        """The context a decode row attends over, averaged over every decode row of the run.

        Attention reads every cell a sequence holds, so a step costs more late in a long request
        than at its start; a step line meant for this workload is measured at this context.
        """
        rows = weighted = 0.0
        for agent in range(self.agents):
            history = 0
            for turn in range(self.requests_per_agent):
                n = self.max_tokens(agent, turn)
                prompt = self.system_tokens + self.prompt_tokens + history
                rows += n
                weighted += n * (prompt + (n - 1) / 2)
                if self.conversation:
                    history += n + self.tool_tokens
        return weighted / rows

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


SYSTEM_FILLER = (
    "You are a coding agent in a shared repository. Tools: read_file(path), write_file(path, text), "
    "run_tests(pattern), search(query). Answer with one tool call or a final report. "
)


def system_text(approx_tokens: int) -> str:
    """The system prompt every agent shares, about approx_tokens long."""
    want = approx_tokens * 4
    return (SYSTEM_FILLER * (want // len(SYSTEM_FILLER) + 1))[:want]


def tool_text(agent: int, turn: int, approx_tokens: int) -> str:
    """The result of the tool the agent called in `turn`, different per agent and turn."""
    head = f"Tool result for agent {agent + 1}, call {turn + 1}: "
    want = max(approx_tokens * 4 - len(head), 0)
    body = ("3 passed, 1 failed: test_parse_empty_input expected [] got None. " * (want // 60 + 1))[:want]
    return head + body
