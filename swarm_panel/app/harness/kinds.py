"""The harnesses the panel can launch: what each is called, where its executable is, how to install it,
which API it speaks and how much context its first turn needs.

Nothing is installed at run time: a harness not found is reported with the one command that installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# First-turn prompt tokens of each harness's captured traffic (tests/data/harnesses), counted through the
# bundled SmolLM2's template and tokenizer: the context a lane must hold before it answers once (docs/agents.md).
CLAUDE_CODE_CONTEXT = 23_570  # Claude Code 2.1.197, /v1/messages
CODEX_CONTEXT = 9_024  # Codex CLI 0.171.0, /v1/responses
QWEN_CODE_CONTEXT = 18_678  # Qwen Code 0.15.10, /v1/chat/completions
OPENCODE_CONTEXT = 7_583  # opencode 1.18.33, /v1/chat/completions
AIDER_CONTEXT = 743  # aider 0.86.2 with the repo map off, /v1/chat/completions

VERSION_TIMEOUT_S = 20.0  # a Node harness's --version loads its whole bundle first

APIS = {"anthropic": "Anthropic Messages", "responses": "OpenAI Responses", "chat": "OpenAI Chat Completions"}


@dataclass(frozen=True, slots=True)
class HarnessKind:
    key: str  # the kind's name on the command line and in agent names: claude-code-1
    display: str
    executable: str  # looked up on PATH; an absolute path is taken as it is
    install: str  # the one command that installs it
    api: str  # a key of APIS
    context_tokens: int  # the first turn's prompt
    recipe: str = ""  # app.harness.config's recipe for its config and command; empty: the key's own
    elsewhere: tuple[str, ...] = ()  # places its install command puts it off PATH (~ expanded)

    @property
    def env_var(self) -> str:
        """The variable that names its executable where it is neither on PATH nor where we look."""
        return "SWARM_PANEL_" + self.key.upper().replace("-", "_")

    @property
    def recipe_name(self) -> str:
        return self.recipe or self.key

    def path(self) -> str | None:
        """Its executable: the variable's, else PATH's, else where its install command puts it."""
        for candidate in (os.environ.get(self.env_var), self.executable,
                          *(os.path.expanduser(p) for p in self.elsewhere)):
            found = shutil.which(candidate) if candidate else None
            if found:
                return found
        return None

    def found(self) -> bool:
        return self.path() is not None


def installed_version(path: str) -> str | None:
    """The first line `PATH --version` prints, or None if it says nothing in time (it runs the program)."""
    try:
        done = subprocess.run([path, "--version"], check=False, capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


KINDS: dict[str, HarnessKind] = {kind.key: kind for kind in (
    HarnessKind("claude-code", "Claude Code", "claude", "npm install -g @anthropic-ai/claude-code", "anthropic",
                CLAUDE_CODE_CONTEXT),
    HarnessKind("codex", "Codex CLI", "codex", "npm install -g @openai/codex", "responses", CODEX_CONTEXT),
    HarnessKind("opencode", "opencode", "opencode", "npm install -g opencode-ai", "chat", OPENCODE_CONTEXT),
    HarnessKind("qwen-code", "Qwen Code", "qwen", "npm install -g @qwen-code/qwen-code", "chat", QWEN_CODE_CONTEXT),
    HarnessKind("aider", "aider", "aider",
                "python3 -m venv ~/.venvs/aider && ~/.venvs/aider/bin/pip install aider-chat", "chat", AIDER_CONTEXT,
                elsewhere=("~/.venvs/aider/bin/aider",)),
)}
