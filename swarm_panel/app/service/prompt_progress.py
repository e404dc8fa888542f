"""How far each agent's prompt has been computed, for the panel and the log.

A harness's first turn is 8-21k tokens; on a CPU that is minutes before the first output token,
and a user watching a quiet agent cannot tell a long prompt from a hang. The panel shows
"prefill 14,336 / 20,928" in the agent's row; the log writes a line for each long prompt under way
every PROGRESS_EVERY_S (on a daemon thread, so it goes on whether or not steps produce outputs).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from swarm_panel.app.service.agents import AgentActivity

log = logging.getLogger("swarm_panel.requests")

PROGRESS_EVERY_S = 10.0
# Prompts with fewer tokens left to compute finish within a few seconds on a CPU: no line for them.
PROGRESS_MIN_TOKENS = 1024


@dataclass(slots=True, frozen=True)
class PromptProgress:
    agent: str
    done: int  # prompt tokens in KV, reused ones included
    total: int
    reused: int

    def text(self) -> str:
        return f"{self.done:,} / {self.total:,}"


def prompt_progress(activity: AgentActivity) -> dict[str, PromptProgress]:
    """Each agent whose latest request is still computing its prompt (no output token yet)."""
    progress = {}
    for turn in activity.turns():
        request = turn.request
        if request.is_finished or request.num_output_tokens:
            continue
        done = min(request.num_computed_tokens, request.num_prompt_tokens)
        progress[turn.agent] = PromptProgress(turn.agent, done, request.num_prompt_tokens, request.num_cached_tokens)
    return progress


class ProgressLog:
    """Writes the long prompts' progress every `every_s` until stopped."""

    def __init__(self, activity: AgentActivity, every_s: float = PROGRESS_EVERY_S,
                 min_tokens: int = PROGRESS_MIN_TOKENS) -> None:
        self.activity = activity
        self.every_s = every_s
        self.min_tokens = min_tokens
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def lines(self) -> list[str]:
        return [f"{p.agent}: prompt {p.done:,} of {p.total:,} tokens in ({100 * p.done // p.total}%, "
                f"{p.reused:,} reused)"
                for p in prompt_progress(self.activity).values() if p.total - p.reused >= self.min_tokens]

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="prompt-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for line in self.lines():
                log.info("%s", line)
