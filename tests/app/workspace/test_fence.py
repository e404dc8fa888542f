"""The fences' command lines: bubblewrap's mounts in order below the reaper, Landlock's grants, what both re-expose
from the hidden home and /tmp, the same command unchanged where there is no fence; and the Landlock ruleset
applied for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm_panel.app.fence import bridge, landlock, seccomp
from swarm_panel.app.fence.choose import detect, wrap
from swarm_panel.app.fence.program import exec_prefix
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, NONE, Fence, Walls


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
    worktrees = tmp_path / "data" / "worktrees"
    walls = Walls(((tree, Path("/tmp/swarm-panel-agent-work-1")), (config, config)), readable=(repo_git,),
                  sealed=((tree / ".git", Path("/tmp/swarm-panel-agent-work-1/.git")),), hidden=(worktrees,))
    argv = wrap(Fence(BWRAP, "/usr/bin/bwrap"), [str(program), "run", "task"], walls,
                Path("/tmp/swarm-panel-agent-work-1"), home=home)
    # The reaper on top, bubblewrap below it, the harness last.
    prefix = [*exec_prefix(), "--supervise-only", "--parent", str(os.getpid()), "--", "/usr/bin/bwrap"]
    assert argv[:len(prefix)] == prefix and argv[-4:] == ["--", str(program), "run", "task"]
    # The bridge its pid 1 (no other unfiltered process there), the harness through the seccomp filter.
    filtered = seccomp.command([str(program), "run", "task"])
    assert argv[-len(filtered):] == filtered and argv[-len(filtered) - 1] == "--"
    assert "--as-pid-1" in argv and argv[argv.index("--chdir") + 3:-len(filtered) - 1] == bridge.command({}, [])[:-1]
    assert "--new-session" in argv
    assert pairs(argv, "--ro-bind")[0] == ("/", "/")
    assert "--unshare-net" not in argv and "--unshare-all" not in argv  # 127.0.0.1 is the host's
    tmpfs = [argv[i + 1] for i, word in enumerate(argv) if word == "--tmpfs"]
    assert tmpfs == [str(home), "/tmp"]  # the worktrees' folder is under /tmp here: hidden with it
    ro = pairs(argv, "--ro-bind")
    # Its install (the folder holding its bin/) and the repository's .git exactly, not ~/.venvs nor ~/projects.
    assert (str(home / ".venvs" / "agent"), str(home / ".venvs" / "agent")) in ro and (str(repo_git), str(repo_git)) in ro
    assert not any(path in (str(home / "projects"), str(home / ".venvs")) for path, _ in ro)
    rw = pairs(argv, "--bind")
    assert rw == [(str(tree), "/tmp/swarm-panel-agent-work-1"), (str(config), str(config))]
    # Later mounts win: hidden first, then re-exposed, then the writable ones, then what stays sealed in them.
    order = [argv.index(word) for word in ("--tmpfs", str(home / ".venvs" / "agent"), str(tree), str(tree / ".git"))]
    assert order == sorted(order)
    assert argv[argv.index("--chdir") + 1] == "/tmp/swarm-panel-agent-work-1"


def test_without_a_fence_the_command_is_unchanged(tmp_path):
    argv = ["agent", "run"]
    assert wrap(Fence(NONE, reason="not installed"), argv, Walls(((tmp_path, tmp_path),)), tmp_path) == argv


def test_a_missing_bwrap_is_named_with_how_to_install_it():
    fence = detect(BWRAP, bwrap_executable="swarm-panel-no-such-bwrap")
    assert not fence.available and "not installed" in fence.reason and "apt-get install bubblewrap" in fence.reason
    assert fence.describe().startswith("no fence: ")
    with pytest.raises(ValueError, match="auto, bubblewrap, landlock"):
        detect("firejail")


def test_without_bwrap_auto_falls_to_landlock_or_names_both_reasons(monkeypatch):
    from swarm_panel.app.fence import bwrap

    monkeypatch.setattr(bwrap, "probe", lambda executable=None: (None, "bubblewrap (bwrap) is not installed"))
    fence = detect()
    if landlock.probe():
        assert fence.kind == NONE and "bubblewrap" in fence.reason and landlock.probe() in fence.reason
    else:
        assert fence.kind == LANDLOCK and "Landlock" in fence.describe()


def test_landlock_grants_reading_beside_the_hidden_folders_and_writing_only_the_walls(tmp_path):
    home = tmp_path / "home"
    (home / ".venvs" / "agent" / "bin").mkdir(parents=True)
    program = home / ".venvs" / "agent" / "bin" / "agent"
    program.write_text("#!/bin/sh\n")
    (home / "secrets").mkdir()
    tree, config = home / ".local" / "tree", tmp_path / "state" / "swarm-panel-agent-home-1"
    walls = Walls(((tree, tree), (config, config)), tmp=config / "tmp")
    argv = wrap(Fence(LANDLOCK), [str(program), "run"], walls, tree, home=home)
    assert argv[:len(exec_prefix())] == exec_prefix() and argv[-3:] == ["--", str(program), "run"]
    reads = [argv[i + 1] for i, word in enumerate(argv) if word == "--read"]
    writes = [argv[i + 1] for i, word in enumerate(argv) if word == "--write"]
    assert writes == [str(tree), str(config)]
    assert argv[argv.index("--tmp") + 1] == str(config / "tmp") and argv[argv.index("--chdir") + 1] == str(tree)
    # Beneath the hidden home only its install folder; beside them, all but /dev (a disk's device holds the home).
    assert str(home / ".venvs" / "agent") in reads and "/usr" in reads and "/" not in reads and "/tmp" not in reads
    assert not any(path in (str(home), str(home / "secrets"), str(home / ".venvs"), "/dev") for path in reads)


def test_landlock_reads_beside_each_hidden_folder_and_beside_each_folder_above_it():
    roots = landlock.visible_roots([Path("/usr/share"), Path("/tmp")])
    assert Path("/usr/bin") in roots and Path("/usr/lib") in roots and Path("/etc") in roots
    assert not {Path("/"), Path("/usr"), Path("/usr/share"), Path("/tmp")} & set(roots)


needs_landlock = pytest.mark.skipif(bool(landlock.probe()), reason=landlock.probe() or "Landlock works")


@needs_landlock
def test_under_landlock_a_program_writes_only_its_walls_and_reads_nothing_hidden(tmp_path):
    """The ruleset applied for real: the program it becomes is refused what the walls do not grant."""
    home, tree, tmp = tmp_path / "home", tmp_path / "tree", tmp_path / "scratch"
    for folder in (home, tree, tmp):
        folder.mkdir()
    (home / "key").write_text("secret")
    probe_script = (
        "import os, sys\n"
        "def attempt(what, action):\n"
        "    try:\n"
        "        action()\n"
        "        print(what, 'ok')\n"
        "    except OSError as exc:\n"
        "        print(what, exc.strerror)\n"
        f"attempt('tree', lambda: open({str(tree / 'made')!r}, 'w').write('x'))\n"
        "attempt('tmpdir', lambda: open(os.path.join(os.environ['TMPDIR'], 'made'), 'w').write('x'))\n"
        f"attempt('home-read', lambda: open({str(home / 'key')!r}).read())\n"
        f"attempt('home-write', lambda: open({str(home / 'made')!r}, 'w').write('x'))\n"
        "attempt('etc', lambda: open('/etc/swarm-panel-landlock-test', 'w').write('x'))\n"
        "attempt('null', lambda: open('/dev/null', 'w').write('x'))\n"
        "attempt('usr-read', lambda: open('/etc/hostname').read())\n"
    )
    walls = Walls(((tree, tree),), tmp=tmp)
    argv = wrap(Fence(LANDLOCK), ["python3", "-c", probe_script], walls, tree, home=home)
    # The grants as the launcher gives them, but the test's own tmp_path (under /tmp) left readable for python3.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert said["tree"] == "ok" and said["tmpdir"] == "ok" and said["null"] == "ok"
    assert said["home-read"] == "Permission denied" and said["home-write"] == "Permission denied"
    assert said["etc"] == "Permission denied"
    assert not (home / "made").exists() and (tree / "made").read_text() == "x"


@needs_landlock
def test_a_ruleset_that_cannot_be_applied_runs_nothing(tmp_path):
    """Whatever stops the ruleset, the program is never run unfenced: the fence's program with a kernel that
    refuses (its ruleset call made to fail) exits 126, and the command it was given never ran."""
    made = tmp_path / "ran"
    refusing = (
        "import sys\n"
        "from swarm_panel.app.fence import landlock_exec\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('the kernel said no')\n"
        "landlock_exec.fence = refuse\n"
        f"sys.exit(landlock_exec.main(['--write', {str(tmp_path)!r}, '--', 'touch', {str(made)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", refusing], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 126
    assert "the fence could not be made: the kernel said no" in done.stderr and not made.exists()



@needs_landlock
def test_under_landlock_the_harness_ends_with_whoever_launched_it(tmp_path):
    """As bubblewrap's --die-with-parent: a launcher that dies takes its fenced harness with it."""
    launcher = (
        "import subprocess\n"
        "from pathlib import Path\n"
        "from swarm_panel.app.fence.choose import wrap\n"
        "from swarm_panel.app.fence.walls import LANDLOCK, Fence, Walls\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "argv = wrap(Fence(LANDLOCK), ['sleep', '600'], Walls(((folder, folder),)), folder, home=folder / 'home')\n"
        "p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=60, check=True)
    pid = int(done.stdout)
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper that may never come in a container."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_guarantees_say_what_each_fence_holds_here_and_why(monkeypatch):
    from swarm_panel.app.fence.guarantees import ABSTRACT, ENV, NAMED_SOCKETS, PROC, SIGNALS, TREE, guarantees

    none = {g.what: g for g in guarantees(Fence(NONE, reason="bubblewrap (bwrap) is not installed"))}
    assert none[ENV].held and not any(g.held for what, g in none.items() if what != ENV)
    assert "bubblewrap (bwrap) is not installed" in none[TREE].why
    monkeypatch.setattr(landlock, "abi", lambda: 5)
    monkeypatch.setattr(landlock, "probe_namespaces", lambda: "unshare: Operation not permitted")
    held = {g.what: g.held for g in guarantees(Fence(LANDLOCK))}
    # ABI 5 has no scopes; without namespaces the host's /proc is listed; the reaper still ends the tree;
    # the seccomp filter refuses every Unix socket of its own making, whatever the ABI.
    assert held[TREE] and not held[PROC] and not held[SIGNALS] and held[ABSTRACT] and held[NAMED_SOCKETS]
    bubblewrap = {g.what: g.held for g in guarantees(Fence(BWRAP, "/usr/bin/bwrap"))}
    assert bubblewrap[PROC] and bubblewrap[SIGNALS] and bubblewrap[ABSTRACT] and bubblewrap[NAMED_SOCKETS]


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_the_fences_top_process_ends_as_its_child_killed_by_a_signal(signal_name):
    """A Stop's kill reaches the harness before the top process: it then ends by the same signal, SIGKILL too
    (which no handler can be set for)."""
    ends_as = (
        "import os, signal\n"
        "from swarm_panel.app.fence.reaper import exit_as\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    signal.pause()\n"
        f"os.kill(pid, signal.{signal_name})\n"
        "exit_as(os.waitpid(pid, 0)[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", ends_as], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -getattr(signal, signal_name), done.stderr
