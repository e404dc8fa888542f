"""The bubblewrap command line: its mounts in order, what it re-exposes from the hidden home and /tmp, and the
same command, unchanged, where there is no fence."""

from __future__ import annotations

from pathlib import Path

from swarm_panel.app.fence.bwrap import BWRAP, NONE, Fence, Walls, detect, wrap


def pairs(argv: list[str], option: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, word in enumerate(argv) if word == option]


def test_the_fence_hides_home_and_tmp_then_binds_what_the_launch_needs(tmp_path):
    home = tmp_path / "home"
    venv = home / ".venvs" / "agent" / "bin"
    venv.mkdir(parents=True)
    program = venv / "agent"
    program.write_text(f"#!{venv}/python\n")
    (venv / "python").write_text("")
    repo_git = home / "projects" / "repo" / ".git"
    repo_git.mkdir(parents=True)
    tree, config = home / ".local" / "tree", Path("/tmp/swarm-panel-agent-home-1")
    walls = Walls(((tree, Path("/tmp/swarm-panel-agent-work-1")), (config, config)), readable=(repo_git,),
                  sealed=((tree / ".git", Path("/tmp/swarm-panel-agent-work-1/.git")),))
    argv = wrap(Fence(BWRAP, "/usr/bin/bwrap"), [str(program), "run", "task"], walls,
                Path("/tmp/swarm-panel-agent-work-1"), home=home)
    assert argv[0] == "/usr/bin/bwrap" and argv[-4:] == ["--", str(program), "run", "task"]
    assert pairs(argv, "--ro-bind")[0] == ("/", "/")
    assert "--unshare-net" not in argv and "--unshare-all" not in argv  # 127.0.0.1 is the host's
    tmpfs = [argv[i + 1] for i, word in enumerate(argv) if word == "--tmpfs"]
    assert tmpfs == [str(home), "/tmp"]
    ro = pairs(argv, "--ro-bind")
    # Its install folder (the first under the home) and the repository's .git exactly, not ~/projects whole.
    assert (str(home / ".venvs"), str(home / ".venvs")) in ro and (str(repo_git), str(repo_git)) in ro
    assert not any(path == str(home / "projects") for path, _ in ro)
    rw = pairs(argv, "--bind")
    assert rw == [(str(tree), "/tmp/swarm-panel-agent-work-1"), (str(config), str(config))]
    # Later mounts win: hidden first, then re-exposed, then the writable ones, then what stays sealed in them.
    order = [argv.index(word) for word in ("--tmpfs", str(home / ".venvs"), str(tree), str(tree / ".git"))]
    assert order == sorted(order)
    assert argv[argv.index("--chdir") + 1] == "/tmp/swarm-panel-agent-work-1"


def test_without_a_fence_the_command_is_unchanged(tmp_path):
    argv = ["agent", "run"]
    assert wrap(Fence(NONE, reason="not installed"), argv, Walls(((tmp_path, tmp_path),)), tmp_path) == argv


def test_a_missing_bwrap_is_named_with_how_to_install_it():
    fence = detect("swarm-panel-no-such-bwrap")
    assert not fence.available and "not installed" in fence.reason and "apt-get install bubblewrap" in fence.reason
    assert fence.describe().startswith("no fence: ")

