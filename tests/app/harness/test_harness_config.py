"""Each harness's private config: the agent's base URL, the output limit and the private home are in
what it reads, and neither the user's home nor the user's own variables are."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from swarm_panel.app.harness.config import PASSED, PASSED_PREFIXES, RECIPES, HarnessOptions, Job, passed, prepare

SERVER = "http://127.0.0.1:9999"
AGENT_URL = f"{SERVER}/agents/kind-7"
OUTPUT = 4242  # an output limit no default has
CONTEXT = 40960


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-the-users-own")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example.com/v1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    return home


def job(tmp_path: Path, **options) -> Job:
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    (folder / "hello.py").write_text('print("hello")\n')
    (folder / ".env").write_text("SECRET=1\n")
    (folder / "sub").mkdir(exist_ok=True)
    return Job("/opt/bin/harness", SERVER, "kind-7", folder, "Read hello.py", tmp_path / "private",
               HarnessOptions(max_output_tokens=OUTPUT, context_tokens=CONTEXT, **options))


def everything(launch) -> str:
    """The command line, the variables set and every file written: all the harness reads from us."""
    files = [p.read_text() for p in sorted(launch.home.rglob("*")) if p.is_file()]
    return "\n".join([*launch.argv, *(f"{k}={v}" for k, v in launch.env.items()), *files])


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_points_at_the_agent_path_in_a_private_home(recipe, tmp_path, user_home):
    launch = prepare(recipe, job(tmp_path))
    text = everything(launch)
    assert AGENT_URL in text
    assert launch.env["HOME"] == str(tmp_path / "private") == str(launch.home)
    assert str(user_home) not in text
    assert "sk-the-users-own" not in text and "api.example.com" not in text
    assert "ANTHROPIC_API_KEY" not in launch.env
    assert launch.argv[0] == "/opt/bin/harness" and launch.argv[-1] in ("Read hello.py", "hello.py")
    if recipe != "codex":  # Codex has no such setting: `agents run` sets the server's default instead
        assert str(OUTPUT) in text
    for name, value in launch.env.items():  # every config folder it is given is the private one
        if name.endswith(("_HOME", "_DIR")) and name.startswith(("CLAUDE", "CODEX", "QWEN", "XDG")):
            assert Path(value).is_relative_to(launch.home), name


def test_claude_code_reads_the_anthropic_variables(tmp_path, user_home):
    launch = prepare("claude-code", job(tmp_path, api_key="k-1"))
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == AGENT_URL
    assert env["ANTHROPIC_AUTH_TOKEN"] == "k-1"
    assert env["ANTHROPIC_MODEL"] == "swarm-panel"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == str(OUTPUT)
    assert Path(env["CLAUDE_CONFIG_DIR"]).is_dir()
    assert env["DISABLE_TELEMETRY"] == "1"
    argv = launch.argv
    assert "--print" in argv and "--allowedTools" in argv and "--dangerously-skip-permissions" not in argv
    assert argv[-2:] == ["--", "Read hello.py"]


def test_codex_gets_a_responses_provider_in_its_own_home(tmp_path, user_home):
    launch = prepare("codex", job(tmp_path))
    config = tomllib.loads((Path(launch.env["CODEX_HOME"]) / "config.toml").read_text())
    assert config["model_provider"] == "swarm" and config["model"] == "swarm-panel"
    assert config["model_context_window"] == CONTEXT
    provider = config["model_providers"]["swarm"]
    assert provider["base_url"] == AGENT_URL + "/v1" and provider["wire_api"] == "responses"
    assert launch.env[provider["env_key"]] == "swarm-panel"  # the dummy key, under the name it reads
    assert launch.argv[1:3] == ["exec", "--skip-git-repo-check"]
    assert launch.argv[launch.argv.index("--sandbox") + 1] == "workspace-write"


def test_opencode_declares_an_openai_compatible_provider_with_limits(tmp_path, user_home):
    launch = prepare("opencode", job(tmp_path))
    path = Path(launch.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    config = json.loads(path.read_text())
    provider = config["provider"]["swarm"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == AGENT_URL + "/v1"
    assert provider["models"]["swarm-panel"]["limit"] == {"context": CONTEXT, "output": OUTPUT}
    assert launch.argv[1:4] == ["run", "--model", "swarm/swarm-panel"]
    for part in ("DATA", "STATE", "CACHE"):
        assert Path(launch.env[f"XDG_{part}_HOME"]).is_relative_to(launch.home)


def test_qwen_code_reads_openai_variables_and_its_own_settings(tmp_path, user_home):
    launch = prepare("qwen-code", job(tmp_path))
    env = launch.env
    assert env["OPENAI_BASE_URL"] == AGENT_URL + "/v1" and env["OPENAI_MODEL"] == "swarm-panel"
    assert env["QWEN_CODE_MAX_OUTPUT_TOKENS"] == str(OUTPUT)
    settings = json.loads((Path(env["QWEN_HOME"]) / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["memory"]["enableManagedAutoMemory"] is False
    assert settings["model"]["generationConfig"]["contextWindowSize"] == CONTEXT
    assert "--yolo" in launch.argv and launch.argv[-1] == "Read hello.py"


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_the_agents_key_reaches_the_harness_off_its_command_line(recipe, tmp_path, user_home):
    # A command line can be read by every process of the machine, another agent's too where the fence has
    # no pid namespace: a key there would let it send as this agent.
    key = "the-agents-own-key-5c1e"
    launch = prepare(recipe, job(tmp_path, api_key=key))
    assert not any(key in word for word in launch.argv)
    assert key in everything(launch)


def test_aider_gets_flags_the_folders_files_and_no_history_in_the_folder(tmp_path, user_home):
    launch = prepare("aider", job(tmp_path))
    argv = launch.argv

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--openai-api-base") == AGENT_URL + "/v1"
    assert value("--model") == "openai/swarm-panel" and value("--message") == "Read hello.py"
    assert {"--yes-always", "--no-git", "--no-check-update", "--no-show-model-warnings"} <= set(argv)
    assert argv[-1] == "hello.py" and ".env" not in argv and "sub" not in argv  # files, not hidden ones or folders
    for flag in ("--chat-history-file", "--input-history-file", "--env-file", "--model-settings-file"):
        assert Path(value(flag)).is_relative_to(launch.home)
    settings = json.loads(Path(value("--model-settings-file")).read_text())
    assert settings == [{"name": "openai/swarm-panel", "extra_params": {"max_tokens": OUTPUT}}]
    metadata = json.loads(Path(value("--model-metadata-file")).read_text())
    assert metadata["openai/swarm-panel"]["max_input_tokens"] == CONTEXT


@pytest.mark.parametrize("bad", ["", "two words", "a/b"])
def test_a_model_name_a_harness_cannot_carry_is_refused(bad):
    with pytest.raises(ValueError, match="model name"):
        HarnessOptions(model=bad)


TIMEOUT_SETTINGS = ("API_TIMEOUT_MS", "CLAUDE_STREAM_IDLE_TIMEOUT_MS", "stream_idle_timeout_ms", "chunkTimeout",
                    "headerTimeout", '"timeout"', "--timeout")


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_harness_keeps_its_own_timeouts_unless_one_is_asked_for(recipe, tmp_path, user_home):
    # The check: every harness completes with its own default timeouts (the server's keep-alives
    # hold their watchdogs); a slower machine may raise them all at once.
    for name in ("kept", "raised"):
        (tmp_path / name).mkdir()
    kept = everything(prepare(recipe, job(tmp_path / "kept")))
    assert not [name for name in TIMEOUT_SETTINGS if name in kept]
    raised = everything(prepare(recipe, job(tmp_path / "raised", request_timeout_s=1800)))
    assert "1800000" in raised or ("--timeout" in raised and "\n1800\n" in raised)



@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_of_the_users_environment_only_the_allowlist_passes(recipe, tmp_path, user_home, monkeypatch):
    for name, value in {"GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "aws_x", "HF_TOKEN": "hf_x",
                        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent", "HTTPS_PROXY": "http://user:pw@proxy:3128",
                        "LD_PRELOAD": "/tmp/evil.so", "NODE_OPTIONS": "--require /tmp/evil.js",
                        "LANG": "en_US.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm", "TZ": "UTC",
                        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}.items():
        monkeypatch.setenv(name, value)
    launch = prepare(recipe, job(tmp_path))
    env = launch.env
    assert not {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "SSH_AUTH_SOCK", "HTTPS_PROXY", "LD_PRELOAD",
                "NODE_OPTIONS"} & set(env)
    assert (env["LANG"], env["LC_ALL"], env["TERM"], env["TZ"]) == ("en_US.UTF-8", "C.UTF-8", "xterm", "UTC")
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt" and env["PATH"]
    # Whatever else it has, the recipe set it.
    assert {n for n in env if n in os.environ and os.environ[n] == env[n]} <= PASSED | {
        n for n in env if n.startswith(PASSED_PREFIXES)}


def test_the_allowlist_keeps_names_and_locales_and_drops_all_else():
    assert passed({"PATH": "/usr/bin", "LC_CTYPE": "C.UTF-8", "HOME": "/root", "GITHUB_TOKEN": "x", "XDG_RUNTIME_DIR":
                   "/run/user/0", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus"}) == {
        "PATH": "/usr/bin", "LC_CTYPE": "C.UTF-8"}
