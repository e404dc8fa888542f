"""The launcher, with a stand-in harness against the modeled engine's real endpoint: agents named by
their base URL, their turns read from the request log, config homes removed, hung ones killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from swarm_panel.app.fence.choose import detect
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, NONE, Fence
from swarm_panel.app.harness.launcher import (
    EXITED,
    FAILED,
    STOPPED,
    HarnessNotFound,
    Launcher,
    Tail,
)
from swarm_panel.app.server.http_server import HttpServer
from swarm_panel.app.service.agents import RequestLog, RequestRecord
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from tests.app.harness.fake_harness import fake_kind, missing_kind

needs_process_groups = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="POSIX process groups, /proc")


async def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text('print("hello")\n')
    return work


@contextlib.asynccontextmanager
async def modeled_endpoint():
    service = SwarmService(Settings(engine="modeled", port=0, num_lanes=4))
    await asyncio.to_thread(service.start)
    http = HttpServer(service)
    try:
        await http.start()
        yield service, http.url
    finally:
        await http.stop()
        await asyncio.to_thread(service.stop)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that is not us."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def processes_naming(*texts: str) -> list[int]:
    """Live processes whose command line holds each of `texts`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if all(text.encode() in cmdline for text in texts) and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def homes_of(run) -> Path:
    return Path(run.stdout.text.split("home=", 1)[1].split()[0])


def test_agents_are_named_by_their_base_url_and_their_turns_come_from_the_log(folder, tmp_path):
    kind = fake_kind(tmp_path)
    state = tmp_path / "state"

    async def scenario():
        async with modeled_endpoint() as (service, url):
            launcher = Launcher(service.requests, state_dir=state, unconfined=True)
            runs = await launcher.start(kind, folder, url, task="Say hi", n=2)
            assert [r.name for r in runs] == ["fake-agent-1", "fake-agent-2"]
            assert all(r.pid for r in runs)
            assert await launcher.wait(timeout=120)
            more = await launcher.start(kind, folder, url, task="Say hi again")
            assert await launcher.wait(timeout=120)
            return launcher, runs + more

    launcher, runs = asyncio.run(scenario())
    assert [r.name for r in runs] == ["fake-agent-1", "fake-agent-2", "fake-agent-3"]
    for run in runs:
        assert run.status == EXITED and run.exit_code == 0 and run.completed
        assert run.answer().startswith("home=") and "answer:" in run.answer()
        turns = launcher.turns(run.name)
        assert len(turns) == 1  # the server logged its one request under the name its base URL carries
        assert turns[0].endpoint == "/v1/chat/completions" and turns[0].status == 200
        assert turns[0].computed_tokens > 0 and turns[0].output_tokens > 0
        home = homes_of(run)
        assert home.is_relative_to(state) and not home.exists()  # private while it ran, removed after
        assert run.home is None and run.ended is not None and run.ended >= run.started
    assert list(state.iterdir()) == []


@needs_process_groups
def test_a_hung_agent_and_what_it_started_are_killed_after_the_grace(folder, tmp_path):
    kind = fake_kind(tmp_path)

    async def scenario():
        launcher = Launcher(state_dir=tmp_path / "state", grace_s=0.5, unconfined=True)
        [run] = await launcher.start(kind, folder, "http://127.0.0.1:9", task="hang")
        while "hanging" not in run.stdout.text:  # it ignores SIGTERM from here on
            assert not run.finished, run.stderr.text
            await asyncio.sleep(0.05)
        home = homes_of(run)
        assert home.is_dir()
        # The child names the home on its command line (the fence's own process too, where there is one).
        await until(lambda: processes_naming(str(home), "time.sleep(600)"), "the child")
        await launcher.stop(run.name)
        return run, home

    run, home = asyncio.run(scenario())
    # SIGTERM is ignored: after the grace every process below the top one is killed, then the top one.
    assert run.status == STOPPED and run.exit_code in (-signal.SIGKILL, -signal.SIGTERM) and not run.completed
    assert processes_naming(str(home)) == []
    assert not home.exists()


@needs_process_groups
def test_stop_all_ends_every_running_agent_and_leaves_finished_ones(folder, tmp_path):
    kind = fake_kind(tmp_path)

    async def scenario():
        launcher = Launcher(state_dir=tmp_path / "state", grace_s=0.2, unconfined=True)
        [failing] = await launcher.start(kind, folder, "http://127.0.0.1:9", task="fail")
        assert await launcher.wait(timeout=60)
        hung = await launcher.start(kind, folder, "http://127.0.0.1:9", task="hang", n=2)
        await launcher.stop_all()
        return failing, hung

    failing, hung = asyncio.run(scenario())
    assert failing.status == EXITED and failing.exit_code == 3 and not failing.completed
    assert "cannot do that" in failing.stderr.text
    assert [r.status for r in hung] == [STOPPED, STOPPED]


def test_a_kind_not_installed_says_how_to_install_it(folder):
    launcher = Launcher()
    with pytest.raises(HarnessNotFound, match="npm install -g missing-agent"):
        asyncio.run(launcher.start(missing_kind(), folder, "http://127.0.0.1:9"))
    assert launcher.runs == []


def test_an_executable_that_cannot_run_fails_and_leaves_no_home(folder, tmp_path):
    kind = fake_kind(tmp_path)
    Path(kind.executable).write_text("#!/no/such/interpreter\n")
    unfenced = Launcher(state_dir=tmp_path / "state", fence=Fence(NONE, reason="test"), unconfined=True)
    [run] = asyncio.run(unfenced.start(kind, folder, "http://127.0.0.1:9"))
    assert run.status == FAILED and run.error and run.exit_code is None
    assert list((tmp_path / "state").iterdir()) == []

    async def fenced(fence):
        launcher = Launcher(state_dir=tmp_path / "state", fence=fence)
        [run] = await launcher.start(kind, folder, "http://127.0.0.1:9")
        await launcher.wait(30)
        return run

    # The fence starts, and it is the fence (bubblewrap's seccomp step, Landlock's small program) that cannot
    # run the harness: it says so and exits.
    for fence in (f for f in (detect(BWRAP), detect(LANDLOCK)) if f.available):
        run = asyncio.run(fenced(fence))
        assert run.status == EXITED and run.exit_code != 0 and not run.completed
        said = "seccomp: cannot run" if fence.kind == BWRAP else "landlock_exec: cannot run"
        assert said in run.stderr.text and kind.executable in run.stderr.text
        assert list((tmp_path / "state").iterdir()) == []


def test_turns_are_the_agents_own_records():
    log = RequestLog()
    for agent, computed in (("codex-1", 9000), ("codex-2", 8000), ("codex-1", 120)):
        log.record(RequestRecord(agent=agent, endpoint="/v1/responses", status=200, computed_tokens=computed))
    launcher = Launcher(log)
    assert [t.computed_tokens for t in launcher.turns("codex-1")] == [9000, 120]
    assert Launcher().turns("codex-1") == []


def test_the_tail_keeps_the_end_and_decodes_across_chunks():
    tail = Tail(limit=10)
    data = ("x" * 30 + "héllo").encode()
    split = data.index("é".encode()) + 1  # inside the two-byte é
    tail.add(data[:split])
    tail.add(data[split:])
    assert tail.text == "xxxxxhéllo"


def test_a_later_session_gets_the_same_home_path_and_concurrent_ones_never_share(tmp_path):
    from swarm_panel.app.harness.launcher import free_home

    first, second = free_home(tmp_path, "codex"), free_home(tmp_path, "codex")
    assert first != second and first.is_dir() and second.is_dir()
    assert free_home(tmp_path, "aider").name == "swarm-panel-aider-home-1"  # slots are per kind
    first.rmdir()  # the first session ended: its home is removed
    assert free_home(tmp_path, "codex") == first  # the next session's prompt names the same path
