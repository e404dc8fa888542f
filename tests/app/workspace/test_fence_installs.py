"""What a fence shows of a harness's install: its package or virtual environment and its interpreter's prefix,
never the top folder of a PATH entry under the home (~/.local, ~/.cargo hold keys beside the tools); and a
harness reached through links still finds itself inside each fence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swarm_panel.app.fence.choose import detect, wrap
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, Walls, hidden_folders, reexposed, symlinks


def write(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def link(path: Path, target: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def shown(program: Path, home: Path) -> set[Path]:
    return set(reexposed([str(program)], Walls(()), hidden_folders(home)))


def test_a_python_harness_shows_its_environment_and_its_base_python(home):
    base = home / ".pyenv" / "versions" / "3.12.1"
    write(base / "bin" / "python3.12", "")
    venv = home / ".venvs" / "aider"
    write(venv / "pyvenv.cfg", f"home = {base / 'bin'}\nversion = 3.12.1\n", 0o644)
    link(venv / "bin" / "python", str(base / "bin" / "python3.12"))
    aider = write(venv / "bin" / "aider", f"#!{venv / 'bin' / 'python'}\nimport aider\n")
    on_path = link(home / ".local" / "bin" / "aider", str(aider))
    assert shown(on_path, home) == {aider, venv, base, base / "bin" / "python3.12"}
    assert symlinks([str(on_path)], hidden_folders(home)) == [(on_path, str(aider)),
                                                             (venv / "bin" / "python", str(base / "bin" / "python3.12"))]


def test_a_node_harness_shows_its_package_and_the_node_it_runs_on(home, monkeypatch):
    package = home / ".npm-global" / "lib" / "node_modules" / "@openai" / "codex"
    write(package / "package.json", "{}", 0o644)
    script = write(package / "bin" / "codex.js", "#!/usr/bin/env node\n")
    write(package / "node_modules" / "@openai" / "codex-linux-x64" / "vendor" / "codex", "")
    on_path = link(home / ".npm-global" / "bin" / "codex", "../lib/node_modules/@openai/codex/bin/codex.js")
    node = write(home / ".nvm" / "versions" / "node" / "v22.1.0" / "bin" / "node", "")
    monkeypatch.setenv("PATH", f"{node.parent}:/usr/bin:/bin")
    assert shown(on_path, home) == {script, package, node, node.parent.parent}
    assert symlinks([str(on_path)], hidden_folders(home)) == [(on_path, "../lib/node_modules/@openai/codex/bin/codex.js")]


def test_a_tool_in_the_homes_own_folders_shows_itself_not_its_neighbours(home):
    (home / ".cargo").mkdir(parents=True)
    write(home / ".cargo" / "credentials.toml", "token = 'secret'\n", 0o600)
    tool = write(home / ".cargo" / "bin" / "tool", "\x7fELF")
    assert shown(tool, home) == {tool}
    script = write(home / ".local" / "bin" / "x", "#!/usr/bin/python3\n")
    (home / ".local" / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    assert shown(script, home) == {script, home / ".local" / "lib"}  # a `pip install --user`'s packages


FENCES = {kind: detect(kind) for kind in (BWRAP, LANDLOCK)}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.skipif(not f.available, reason=f.reason))
                                  for k, f in FENCES.items()])
def test_a_harness_reached_through_links_runs_inside_the_fence(kind, home, tmp_path):
    package = home / ".npm-global" / "lib" / "node_modules" / "agent"
    write(package / "package.json", "{}", 0o644)
    write(package / "lib" / "answer.txt", "from its own package\n", 0o644)
    write(package / "bin" / "agent.sh", '#!/bin/sh\ncat "$(dirname "$(readlink -f "$0")")/../lib/answer.txt"\n')
    on_path = link(home / ".npm-global" / "bin" / "agent", "../lib/node_modules/agent/bin/agent.sh")
    write(home / ".npm-global" / "etc" / "npmrc", "//registry.npmjs.org/:_authToken=secret\n", 0o600)
    tree = tmp_path / "tree"
    tree.mkdir()
    argv = wrap(FENCES[kind], [str(on_path)], Walls(((tree, tree),)), tree, home=home)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=tree,
                          env={"PATH": os.environ["PATH"]})
    assert (done.returncode, done.stdout) == (0, "from its own package\n"), done.stderr
    peek = wrap(FENCES[kind], ["cat", str(home / ".npm-global" / "etc" / "npmrc")], Walls(((tree, tree),)), tree,
                home=home)
    assert subprocess.run(peek, capture_output=True, text=True, timeout=60, check=False).returncode != 0
