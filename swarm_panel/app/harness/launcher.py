"""Launched harnesses: each one in its own workspace (app.workspace: a git worktree on its own branch, or a
copy), inside the fence (app.fence), a process in its own process group, watched on the asyncio loop, its
output's tail kept, its config home removed when it ends; its turns are its requests in the service's request
log, under the name its base URL gives it. Without a fence nothing is launched unless the user opted in
(`unconfined`); a fence that was named and cannot run refuses every launch. A run is marked ended only once
every process it started has ended (the fence's reaper returns last; Stop's kill reaches them all). Each holds,
until it ends, a key of its own from the server's registry (app.service.agents) and the way out its fence
allows (app.fence.network).

Inside the fence the worktree is seen at its config home's slot's path (/tmp/swarm-panel-KIND-work-SLOT):
Claude Code and Qwen Code write the working folder into their prompt, so a later session in the same slot
sends the same prompt and reuses it whole, as it did when every agent worked in the user's folder.
"""

from __future__ import annotations

import asyncio
import codecs
import itertools
import logging
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from swarm_panel.app.fence.choose import detect, wrap
from swarm_panel.app.fence.network import AgentNetwork
from swarm_panel.app.fence.reaper import kill_tree
from swarm_panel.app.fence.walls import AUTO, BWRAP, LANDLOCK, Fence, Walls
from swarm_panel.app.harness.config import HarnessOptions, Job, prepare
from swarm_panel.app.harness.kinds import HarnessKind
from swarm_panel.app.service.agents import AgentKeys, RequestLog, RequestRecord
from swarm_panel.app.workspace.create import create
from swarm_panel.app.workspace.git import NameTaken, WorkspaceError, out
from swarm_panel.app.workspace.land import discard
from swarm_panel.app.workspace.records import COPY, Workspace, default_root, process_start, save
from swarm_panel.app.workspace.snapshot import snapshot

log = logging.getLogger(__name__)

DEFAULT_TASK = "Read hello.py and say what it prints."
STARTING, RUNNING, EXITED, STOPPED, FAILED = "starting", "running", "exited", "stopped", "failed"
FINISHED = (EXITED, STOPPED, FAILED)
TAIL_CHARS = 16_000  # of each stream: the final answer and the last complaint, not a whole session
STOP_GRACE_S = 5.0  # between SIGTERM and SIGKILL
# After the harness exits, how long its pipes may stay open (a child it left behind holds them).
PIPE_DRAIN_S = 2.0
READ_CHUNK = 4096
NAME_TRIES = 1000  # numbers skipped past kept workspaces of earlier sessions
UNCONFINED = "unconfined"


class HarnessNotFound(ValueError):
    def __init__(self, kind: HarnessKind) -> None:
        super().__init__(f"{kind.display} is not installed (no `{kind.executable}` on PATH, nor {kind.env_var}); "
                         f"install it with: {kind.install}")
        self.kind = kind


class FenceRefused(ValueError):
    """No launch: the fence asked for cannot run here, or there is none and the user did not opt in."""

    def __init__(self, fence: Fence) -> None:
        if fence.asked != AUTO:
            why = (f"the {fence.asked} fence was asked for and cannot run here: {fence.reason}. Nothing was "
                   "launched; choose another fence (auto: bubblewrap, else Landlock)")
        else:
            why = (f"no fence can hold the agents here ({fence.reason}), so nothing was launched. Install "
                   "bubblewrap or use a kernel with Landlock; or opt in to running them unfenced, with your "
                   "rights over all your files: `agents run --unconfined`, or the panel's Unconfined box")
        super().__init__(why)
        self.fence = fence


class Tail:
    """The last `limit` characters of a stream, decoded as the bytes come."""

    def __init__(self, limit: int = TAIL_CHARS) -> None:
        self.limit = limit
        self.text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def add(self, data: bytes) -> None:
        self.text = (self.text + self._decoder.decode(data))[-self.limit:]


@dataclass(eq=False)
class HarnessRun:
    kind: HarnessKind
    name: str  # the agent's name on the server: claude-code-1
    folder: Path
    task: str
    status: str = STARTING
    pid: int | None = None
    exit_code: int | None = None
    started: float = field(default_factory=time.time)
    ended: float | None = None
    error: str | None = None  # why it failed to start
    stdout: Tail = field(default_factory=Tail)
    stderr: Tail = field(default_factory=Tail)
    home: Path | None = None  # its private config home, gone once it has ended
    workspace: Workspace | None = None  # its worktree or copy, kept after it ends until applied or discarded
    confinement: str = ""  # the fence's kind (BWRAP, LANDLOCK) or UNCONFINED
    stop_asked: bool = False
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    watcher: asyncio.Task | None = field(default=None, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def completed(self) -> bool:
        return self.status == EXITED and self.exit_code == 0

    def answer(self, chars: int = 300) -> str:
        """The end of what it printed: under --print/exec/run, its final answer."""
        text = " ".join(self.stdout.text.split())
        return text[-chars:]


class Launcher:
    """Starts harnesses against a server, watches them, stops them; runs on the caller's asyncio loop."""

    def __init__(self, requests: RequestLog | None = None, *, options: HarnessOptions | None = None,
                 state_dir: Path | None = None, grace_s: float = STOP_GRACE_S, workspaces: Path | None = None,
                 unconfined: bool = False, fence: Fence | None = None, keys: AgentKeys | None = None,
                 network: bool = False) -> None:
        self.requests = requests
        self.options = options or HarnessOptions()
        self.state_dir = state_dir  # where config homes go; None: the system's temp folder
        self.grace_s = grace_s
        self.workspaces = workspaces  # where workspaces are kept; None: app.workspace's data folder
        # Without a fence, a harness is launched only on this explicit opt-in.
        self.unconfined = unconfined
        self._fence = fence
        # Where the server keeps its agents' keys: each agent gets its own (never the user's --api-key),
        # good for its own inference only. None: each gets options.api_key, as a server elsewhere needs.
        self.keys = keys
        self.network = network  # a fenced agent reaches the internet through the proxy (app.fence.network)
        self._held: dict[HarnessRun, tuple[str | None, AgentNetwork | None]] = {}
        self.runs: list[HarnessRun] = []
        self._numbers: Counter[str] = Counter()

    def run(self, name: str) -> HarnessRun:
        for run in self.runs:
            if run.name == name:
                return run
        raise KeyError(name)

    @property
    def fence(self) -> Fence:
        """The fence launches run in: bubblewrap, else Landlock, where it works here (probed once), else none
        with the reasons."""
        if self._fence is None:
            self._fence = detect()
        return self._fence

    def confinement(self) -> str:
        """The fence's kind, or UNCONFINED where the user opted in; raises FenceRefused otherwise."""
        if self.fence.available:
            return self.fence.kind
        if self.unconfined and self.fence.asked == AUTO:
            return UNCONFINED
        raise FenceRefused(self.fence)

    def turns(self, name: str) -> list[RequestRecord]:
        """The agent's requests the server has answered (or refused), oldest first."""
        return self.requests.records(agent=name) if self.requests is not None else []

    async def start(self, kind: HarnessKind, folder: Path | str, server_url: str, task: str = DEFAULT_TASK,
                    n: int = 1) -> list[HarnessRun]:
        """Launches n agents of a kind, each in its own workspace made from the folder; raises HarnessNotFound
        with its install command, FenceRefused (see `confinement`), or WorkspaceError (no agent started)
        when the workspaces cannot be made."""
        executable = kind.path()
        if executable is None:
            raise HarnessNotFound(kind)
        if not task.strip():
            raise ValueError("the task is empty")
        await asyncio.to_thread(lambda: self.fence)  # the first probe runs bwrap once
        confinement = self.confinement()
        folder = Path(folder).expanduser()
        workspaces = await asyncio.to_thread(self._make_workspaces, kind, folder, n)
        started = []
        for ws in workspaces:
            run = HarnessRun(kind, ws.name, folder.resolve(), task, workspace=ws, confinement=confinement)
            self.runs.append(run)
            await self._spawn(run, executable, server_url)
            started.append(run)
        return started

    def _make_workspaces(self, kind: HarnessKind, folder: Path, n: int) -> list[Workspace]:
        """All n or none: a failure discards those already made."""
        made: list[Workspace] = []
        try:
            for _ in range(n):
                made.append(self._make_workspace(kind, folder))
        except WorkspaceError:
            for ws in made:
                discard(ws)
            raise
        return made

    def _make_workspace(self, kind: HarnessKind, folder: Path) -> Workspace:
        for _ in range(NAME_TRIES):
            self._numbers[kind.key] += 1
            try:
                return create(folder, f"{kind.key}-{self._numbers[kind.key]}", self.workspaces)
            except NameTaken:
                continue
        raise WorkspaceError(f"{NAME_TRIES} {kind.key} workspaces are kept: discard some "
                             "(`swarm-panel agents discard --all`)")

    async def _spawn(self, run: HarnessRun, executable: str, server_url: str) -> None:
        ws = run.workspace
        assert ws is not None
        try:
            # A folder that cannot be written fails this launch with its reason, never the caller.
            if self.state_dir is not None:
                self.state_dir.mkdir(parents=True, exist_ok=True)
            run.home = free_home(Path(self.state_dir or tempfile.gettempdir()), run.kind.key)
            tree = self._tree_seen_at(run, ws)
            inside = tree / Path(ws.folder).relative_to(ws.tree)
            options, net = await self._access(run, server_url)
            # The recipe reads the folder (aider lists its files) here, outside: its real path.
            launch = prepare(run.kind.recipe_name, Job(executable, server_url, run.name, Path(ws.folder), run.task,
                                                       run.home, options))
            argv = wrap(self.fence, launch.argv, self._walls(run, ws, tree), inside, net=net.plan if net else None)
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=ws.folder, env=net.environ(launch.env) if net else launch.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)  # its own process group: a stop reaches what it started too
        except (OSError, ValueError) as exc:
            log.warning("%s did not start: %s", run.name, exc)
            run.status, run.error, run.ended = FAILED, str(exc), time.time()
            _remove(run)
            await self._release(run)
            return
        log.info("%s started: pid %d in %s (%s)", run.name, process.pid, ws.folder, run.confinement)
        run.process, run.pid, run.status = process, process.pid, RUNNING
        ws.pid, ws.pid_started = process.pid, process_start(process.pid)
        save(ws)
        run.watcher = asyncio.create_task(self._watch(run, process), name=f"harness-{run.name}")

    async def _access(self, run: HarnessRun, server_url: str) -> tuple[HarnessOptions, AgentNetwork | None]:
        """The agent's own key in its options, and what its fence lets it reach; held until it ends."""
        key = self.keys.issue(run.name) if self.keys is not None else None
        self._held[run] = (key, None)
        net = await AgentNetwork.open(self.fence.kind, server_url, internet=self.network)
        self._held[run] = (key, net)
        return (self.options if key is None else replace(self.options, api_key=key)), net

    async def _release(self, run: HarnessRun) -> None:
        key, net = self._held.pop(run, (None, None))
        if key is not None and self.keys is not None:
            self.keys.revoke(key)
        if net is not None:
            await net.close()

    def _tree_seen_at(self, run: HarnessRun, ws: Workspace) -> Path:
        """Where the harness sees its tree: its slot's fixed path inside bubblewrap's mounts, else the real one."""
        if self.fence.kind != BWRAP or run.home is None:
            return ws.tree
        slot = run.home.name.rsplit("-", 1)[-1]
        return Path("/tmp", f"swarm-panel-{run.kind.key}-work-{slot}")  # the fence's own /tmp

    def _walls(self, run: HarnessRun, ws: Workspace, tree: Path) -> Walls:
        assert run.home is not None
        writable = ((ws.tree, tree), (run.home, run.home))
        # Every agent's worktree and record, and every config home: only its own are seen.
        hidden = (Path(self.workspaces or default_root()), run.home.parent)
        tmp = None
        if self.fence.kind == LANDLOCK:  # no /tmp of its own: a temp folder in its config home, gone with it
            tmp = run.home / "tmp"
            tmp.mkdir()
        if ws.mode == COPY:  # its repository is the workspace's git folder, beside its tree: out of reach
            return Walls(writable, tmp=tmp, hidden=hidden)
        common = Path(out(ws.tree, "rev-parse", "--path-format=absolute", "--git-common-dir"))
        return Walls(writable, readable=(common,), tmp=tmp, hidden=hidden)

    async def _watch(self, run: HarnessRun, process: asyncio.subprocess.Process) -> None:
        readers = [asyncio.create_task(_pump(process.stdout, run.stdout)),
                   asyncio.create_task(_pump(process.stderr, run.stderr))]
        try:
            # Fenced, the top process is the fence's reaper: it exits once nothing it started lives.
            run.exit_code = await process.wait()
            _, open_pipes = await asyncio.wait(readers, timeout=PIPE_DRAIN_S)
            if open_pipes:  # unfenced, children it left behind in its group: they end with it
                _signal_group(process, kill=True)
                await asyncio.wait(open_pipes, timeout=PIPE_DRAIN_S)
        finally:
            for reader in readers:
                reader.cancel()
            if run.workspace is not None:  # what review shows and Apply lands, taken before it counts as finished
                await asyncio.to_thread(snapshot, run.workspace)
            run.ended = time.time()
            run.status = STOPPED if run.stop_asked else EXITED
            _remove(run)
            await self._release(run)
            if run.workspace is not None:
                run.workspace.pid = run.workspace.pid_started = None
                save(run.workspace)
            log.info("%s %s with exit code %s", run.name, run.status, run.exit_code)

    async def stop(self, name: str) -> None:
        """SIGTERM to its process group (the fence passes it on to the harness), after the grace period
        SIGKILL to every process below it, then to it; returns once all have ended."""
        run = self.run(name)
        if run.finished or run.process is None or run.watcher is None:
            return
        run.stop_asked = True
        _signal_group(run.process, kill=False)
        if not await _ended(run.watcher, self.grace_s):
            log.info("%s ignored SIGTERM for %.0f s: killing it and all it started", name, self.grace_s)
            await asyncio.to_thread(kill_tree, run.process.pid)
            _signal_group(run.process, kill=True)
            await _ended(run.watcher, None)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(run.name) for run in self.runs if not run.finished))

    def terminate_all(self) -> None:
        """SIGTERM to every running agent's group at once, without waiting: the app is closing."""
        for run in self.runs:
            if not run.finished and run.process is not None:
                run.stop_asked = True
                _signal_group(run.process, kill=False)

    async def wait(self, timeout: float | None = None) -> bool:
        """Waits for every launched agent to end; False if some still run after `timeout` seconds."""
        watchers = [run.watcher for run in self.runs if run.watcher is not None and not run.watcher.done()]
        if watchers:
            await asyncio.wait(watchers, timeout=timeout)
        return all(run.finished for run in self.runs)


def free_home(parent: Path, kind: str) -> Path:
    """A new empty config home, named by the first free slot of the kind: harnesses write their home's
    path into their prompts (Codex its skill roots), so a later session in the same slot sends the
    same prompt and reuses it whole. mkdir is atomic, so two launchers never share one."""
    for slot in itertools.count(1):
        home = parent / f"swarm-panel-{kind}-home-{slot}"
        try:
            home.mkdir()
        except FileExistsError:
            continue
        return home
    raise AssertionError("unreachable")


async def _pump(stream: asyncio.StreamReader | None, tail: Tail) -> None:
    while stream is not None and (data := await stream.read(READ_CHUNK)):
        tail.add(data)


async def _ended(watcher: asyncio.Task, timeout: float | None) -> bool:
    done, _ = await asyncio.wait([watcher], timeout=timeout)
    return bool(done)


def _signal_group(process: asyncio.subprocess.Process, *, kill: bool) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        elif kill:  # Windows: no process groups to signal
            process.kill()
        else:
            process.terminate()
    except ProcessLookupError:  # already gone
        pass


def _remove(run: HarnessRun) -> None:
    if run.home is not None:
        shutil.rmtree(run.home, ignore_errors=True)
        run.home = None
