"""The hostile tests' fixtures: each fence that works here (bubblewrap; Landlock with its pid and mount
namespaces, and Landlock as a machine without them has it), and a fake home with the usual secrets, PATH
entries under it and secret variables, as the user's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from swarm_panel.app.fence import landlock
from swarm_panel.app.fence.choose import detect
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, Fence

NO_NAMESPACES = "landlock-no-namespaces"
SECRETS = {"GITHUB_TOKEN": "ghp_hostile_test_secret", "AWS_SECRET_ACCESS_KEY": "aws-hostile-test-secret",
           "AWS_ACCESS_KEY_ID": "AKIAHOSTILETEST", "HF_TOKEN": "hf_hostile_test_secret",
           "SSH_AUTH_SOCK": "/tmp/ssh-hostile/agent.1", "ANTHROPIC_API_KEY": "sk-ant-hostile-test",
           "NPM_TOKEN": "npm_hostile_test_secret"}


@dataclass(frozen=True)
class Under:
    """The fence a test launches in, and which variant of it."""

    fence: Fence
    name: str

    @property
    def namespaced(self) -> bool:
        """Its own pid and mount namespaces (bubblewrap's, or Landlock's where the machine gives them)."""
        return self.name != NO_NAMESPACES


@pytest.fixture(params=[BWRAP, LANDLOCK, NO_NAMESPACES])
def under(request, monkeypatch) -> Under:
    fence = detect(BWRAP if request.param == BWRAP else LANDLOCK)
    if not fence.available:
        pytest.skip(fence.reason)
    if request.param == LANDLOCK and landlock.probe_namespaces():
        pytest.skip(f"no pid and mount namespaces for Landlock here: {landlock.probe_namespaces()}")
    if request.param == NO_NAMESPACES:  # as a machine without them (no root, no user namespaces)
        monkeypatch.setattr(landlock, "probe_namespaces", lambda: "taken away for this test")
    return Under(fence, request.param)


@pytest.fixture
def fake_home(tmp_path, monkeypatch) -> Path:
    """The user's home, as HOME, with keys beside the tools PATH names under it, and secrets in the
    environment."""
    home = tmp_path / "home"
    files = {".bashrc": "# the user's own\n", ".ssh/id_ed25519": "PRIVATE KEY\n",
             ".cargo/credentials.toml": '[registry]\ntoken = "cargo-secret"\n', ".cargo/bin/cargo-tool": "#!/bin/sh\n",
             ".local/bin/tool": "#!/bin/sh\n", ".local/share/keyrings/login.keyring": "KEYRING\n",
             ".aws/credentials": "[default]\naws_secret_access_key = secret\n",
             "projects/app/hello.py": 'print("hello")\n'}
    for name, text in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{home}/.local/bin:{home}/.cargo/bin:/usr/local/bin:/usr/bin:/bin")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return home
