"""One launch's private config home, command line and environment, per harness.

Every launch gets a folder of its own as HOME and as each harness's config home (CLAUDE_CONFIG_DIR,
CODEX_HOME, XDG_*, QWEN_HOME), so the user's own settings, sessions and keys are neither read nor
touched. Of the user's environment only what names a place or a locale passes (PASSED): no token, key,
agent socket or proxy (GITHUB_TOKEN, AWS_*, HF_TOKEN, SSH_AUTH_SOCK...) reaches a harness. The base URL names the agent
(`/agents/NAME`, app.endpoint.wire), so its requests are counted and logged as NAME whatever
the harness puts in its body. Each flag and variable below was checked against the installed
harness's --help and its package's source (docs/agents.md names the versions).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from swarm_panel.app.endpoint.wire import agent_base_url
from swarm_panel.runtime.core.careful_write import write_file

DEFAULT_MODEL = "swarm-panel"  # the server answers any model name with the model it has loaded
DEFAULT_MAX_OUTPUT_TOKENS = 4096  # per response: long enough for an edit, short enough for a CPU
DEFAULT_CONTEXT_TOKENS = 32768  # the server's default n_ctx; a harness that plans its context uses it
DUMMY_KEY = "swarm-panel"  # a server without --api-key checks none, but every harness wants one
# The harnesses' own timeouts are kept unless the caller sets one: the server's keep-alives hold their
# quiet-stream watchdogs through a long prefill (docs/agents.md), and a hang-up's resend resumes where
# it stopped. A machine slower still can raise them all at once (HarnessOptions.request_timeout_s).
# The user's variables a harness gets: where programs are, the locale, the terminal type, the time zone, the
# user's name and shell (Claude Code runs its commands in $SHELL), and where the system's CA certificates
# are (a path, no secret). Proxies are not passed: the endpoint is on this machine, and a proxy's URL may
# carry its password. HOME, TMPDIR and each harness's own variables are set for the launch.
PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "SSL_CERT_FILE",
                    "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"})
PASSED_PREFIXES = ("LC_",)
# Claude Code refuses --dangerously-skip-permissions as root outside a sandbox; an allow-list runs
# unattended as any user (tools left out are refused, not asked about, under --print).
CLAUDE_CODE_TOOLS = "Read,Edit,Write,Glob,Grep,Bash"
AIDER_MAX_FILES = 32  # the folder's files aider is given to edit; a bigger folder gets the first ones
AIDER_MAX_FILE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class HarnessOptions:
    """What a caller may change about every launch."""

    model: str = DEFAULT_MODEL
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    api_key: str | None = None  # the server's --api-key; None sends a dummy
    context_tokens: int = DEFAULT_CONTEXT_TOKENS  # the server's n_ctx, told to harnesses that plan with it
    request_timeout_s: float | None = None  # None: each harness's own timeouts

    def __post_init__(self) -> None:
        if self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be at least 1")
        if not self.model or any(c.isspace() or c == "/" for c in self.model):
            raise ValueError(f"a model name without spaces or slashes is needed, not {self.model!r}")


@dataclass(frozen=True, slots=True)
class Job:
    """One launch as a recipe sees it."""

    executable: str
    server_url: str
    name: str
    folder: Path
    task: str
    home: Path
    options: HarnessOptions

    @property
    def base_url(self) -> str:
        return agent_base_url(self.server_url, self.name)

    @property
    def key(self) -> str:
        return self.options.api_key or DUMMY_KEY

    @property
    def timeout_ms(self) -> int | None:
        return None if self.options.request_timeout_s is None else round(self.options.request_timeout_s * 1000)


@dataclass(frozen=True, slots=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    home: Path  # removed once the harness has exited


def prepare(recipe: str, job: Job) -> Launch:
    """Writes the job's config under job.home and returns its command and environment."""
    job.home.mkdir(parents=True, exist_ok=True)
    argv, env = RECIPES[recipe](job)
    return Launch(argv, passed(os.environ) | {"HOME": str(job.home), "NO_COLOR": "1"} | env, job.home)


def passed(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` a harness gets (PASSED, LC_*), nothing else."""
    return {k: v for k, v in environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}


def _write(path: Path, text: str) -> Path:
    # A harness without its config would talk to the user's own provider: the launch fails instead.
    if not write_file(path, text.encode(), lost="the harness does not start"):
        raise OSError(f"cannot write the harness's config {path}")
    return path


def claude_code(job: Job) -> tuple[list[str], dict[str, str]]:
    config = job.home / "claude"
    config.mkdir()
    env = {
        "CLAUDE_CONFIG_DIR": str(config),
        "ANTHROPIC_BASE_URL": job.base_url,
        "ANTHROPIC_AUTH_TOKEN": job.key,
        "ANTHROPIC_MODEL": job.options.model,
        # Its background calls (titles, summaries) name a Haiku model otherwise.
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": job.options.model,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(job.options.max_output_tokens),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    if job.timeout_ms is not None:
        # Its watchdog on a stream without events never waits less than 5 minutes, whatever this says.
        env |= {"API_TIMEOUT_MS": str(job.timeout_ms), "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(job.timeout_ms)}
    argv = [job.executable, "--print", "--output-format", "text", "--allowedTools",
            CLAUDE_CODE_TOOLS, "--", job.task]
    return argv, env


def codex(job: Job) -> tuple[list[str], dict[str, str]]:
    # Codex 0.171 has no setting for the output limit: its requests leave max_output_tokens to the server.
    home = job.home / "codex"
    _write(home / "config.toml", "\n".join((
        f"model = {_toml(job.options.model)}",
        'model_provider = "swarm"',
        f"model_context_window = {job.options.context_tokens}",
        'approval_policy = "never"',
        'sandbox_mode = "workspace-write"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.swarm]",
        'name = "swarm-panel"',
        f"base_url = {_toml(job.base_url + '/v1')}",
        'wire_api = "responses"',
        'env_key = "SWARM_PANEL_AGENT_KEY"',
        *([] if job.timeout_ms is None else [f"stream_idle_timeout_ms = {job.timeout_ms}"]),
        "",
    )))
    argv = [job.executable, "exec", "--skip-git-repo-check", "--sandbox", "workspace-write", "--color", "never",
            "--", job.task]
    return argv, {"CODEX_HOME": str(home), "SWARM_PANEL_AGENT_KEY": job.key}


def opencode(job: Job) -> tuple[list[str], dict[str, str]]:
    xdg = {f"XDG_{part.upper()}_HOME": str(job.home / part) for part in ("config", "data", "state", "cache")}
    model = job.options.model
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"swarm": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "swarm-panel",
            "options": {"baseURL": job.base_url + "/v1", "apiKey": job.key} | (
                {} if job.timeout_ms is None else
                {"timeout": job.timeout_ms, "headerTimeout": job.timeout_ms, "chunkTimeout": job.timeout_ms}),
            "models": {model: {"name": model, "limit": {"context": job.options.context_tokens,
                                                        "output": job.options.max_output_tokens}}},
        }},
        "model": f"swarm/{model}",
        "small_model": f"swarm/{model}",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow"},
    }
    _write(job.home / "config" / "opencode" / "opencode.json", json.dumps(config, indent=2))
    env = xdg | {
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # models.dev: a download, and nothing it lists is ours
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # it reads ~/.claude's prompts and skills otherwise
    }
    return [job.executable, "run", "--model", f"swarm/{model}", job.task], env


def qwen_code(job: Job) -> tuple[list[str], dict[str, str]]:
    home = job.home / "qwen"
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": job.options.model, "generationConfig": {"contextWindowSize": job.options.context_tokens} | (
            {} if job.timeout_ms is None else {"timeout": job.timeout_ms})},
        "general": {"enableAutoUpdate": False},
        # Its background memory extraction sends a second prompt of ~11k tokens after every task (with
        # another system prompt, so nothing of the first is reused) and writes memory files; the
        # session waits for it before it exits.
        "memory": {"enableManagedAutoMemory": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    _write(home / "settings.json", json.dumps(settings, indent=2))
    env = {
        "QWEN_HOME": str(home),
        "OPENAI_BASE_URL": job.base_url + "/v1",
        "OPENAI_API_KEY": job.key,
        "OPENAI_MODEL": job.options.model,
        # A fixed limit; unset, it asks for 8k and retries a cut answer with 64k.
        "QWEN_CODE_MAX_OUTPUT_TOKENS": str(job.options.max_output_tokens),
    }
    # The positional prompt runs one-shot (-p is deprecated); --yolo approves every tool call.
    argv = [job.executable, "--auth-type", "openai", "--model", job.options.model, "--yolo", job.task]
    return argv, env


def aider(job: Job) -> tuple[list[str], dict[str, str]]:
    home = job.home / "aider"
    model = f"openai/{job.options.model}"
    # YAML is a superset of JSON: the settings file is JSON, no YAML writer needed.
    settings = _write(home / "model-settings.yml", json.dumps(
        [{"name": model, "extra_params": {"max_tokens": job.options.max_output_tokens}}]))
    metadata = _write(home / "model-metadata.json", json.dumps({model: {
        "max_input_tokens": job.options.context_tokens, "max_output_tokens": job.options.max_output_tokens,
        "input_cost_per_token": 0, "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}))
    argv = [
        job.executable, "--model", model, "--openai-api-base", job.base_url + "/v1",
        "--model-settings-file", str(settings), "--model-metadata-file", str(metadata),
        *([] if job.options.request_timeout_s is None else ["--timeout", str(round(job.options.request_timeout_s))]),
        "--yes-always", "--no-git", "--no-check-update", "--no-show-model-warnings", "--no-show-release-notes",
        "--no-analytics", "--no-pretty", "--no-fancy-input", "--map-tokens", "0", "--no-restore-chat-history",
        # Its history and .env would otherwise be the folder's own.
        "--chat-history-file", str(home / "chat-history.md"), "--input-history-file", str(home / "input-history"),
        "--env-file", str(home / ".env"),
        # --yes-always never runs a suggested shell command (aider asks for an explicit yes).
        "--message", job.task, *_folder_files(job.folder),
    ]
    # litellm fetches its model price list at import otherwise. The key goes in the environment, never on the
    # command line, which any process of the machine can read (another agent's too, under Landlock without a
    # pid namespace); aider hands OPENAI_API_KEY to litellm as its --openai-api-key would.
    return argv, {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": job.key}


def _folder_files(folder: Path) -> list[str]:
    """The folder's own files (not hidden, not huge), by name, for aider to read and edit."""
    files = sorted(p.name for p in folder.iterdir()
                   if p.is_file() and not p.name.startswith(".") and p.stat().st_size <= AIDER_MAX_FILE_BYTES)
    return files[:AIDER_MAX_FILES]


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


RECIPES: dict[str, Callable[[Job], tuple[list[str], dict[str, str]]]] = {
    "claude-code": claude_code,
    "codex": codex,
    "opencode": opencode,
    "qwen-code": qwen_code,
    "aider": aider,
}
