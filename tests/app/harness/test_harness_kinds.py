"""The harness kinds: each one's install command and context, and where its executable is found."""

from __future__ import annotations

from swarm_panel.app.harness.kinds import APIS, KINDS, installed_version
from tests.app.harness.fake_harness import fake_kind, missing_kind


def test_every_kind_says_how_to_install_it_and_what_it_needs():
    assert list(KINDS) == ["claude-code", "codex", "opencode", "qwen-code", "aider"]
    for kind in KINDS.values():
        assert kind.install.split()[0] in ("npm", "python3") and kind.api in APIS
    assert KINDS["claude-code"].context_tokens > KINDS["qwen-code"].context_tokens > KINDS["codex"].context_tokens
    assert KINDS["aider"].context_tokens < KINDS["opencode"].context_tokens < KINDS["codex"].context_tokens
    assert KINDS["codex"].api == "responses" and KINDS["claude-code"].api == "anthropic"
    assert KINDS["aider"].env_var == "SWARM_PANEL_AIDER"


def test_a_missing_harness_is_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    kind = missing_kind()
    assert kind.path() is None and not kind.found()
    assert KINDS["aider"].path() is None


def test_the_variable_then_path_then_the_install_folder_find_it(monkeypatch, tmp_path):
    fake = fake_kind(tmp_path)  # an executable script
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path))
    aider = KINDS["aider"]
    assert aider.path() is None
    monkeypatch.setenv("SWARM_PANEL_AIDER", fake.executable)
    assert aider.path() == fake.executable and aider.found()
    monkeypatch.delenv("SWARM_PANEL_AIDER")
    venv = tmp_path / ".venvs" / "aider" / "bin"
    venv.mkdir(parents=True)
    (venv / "aider").symlink_to(fake.executable)
    assert aider.path() == str(venv / "aider")  # where its install command puts it
    monkeypatch.setenv("PATH", str(venv))
    assert aider.path() == str(venv / "aider")


def test_the_version_is_what_it_prints(tmp_path):
    assert installed_version(fake_kind(tmp_path).executable) == "fake-agent 9.9.9"
    assert installed_version(str(tmp_path / "absent")) is None
