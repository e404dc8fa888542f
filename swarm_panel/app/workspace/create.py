"""Making an agent's workspace from the user's folder.

- A git repository: `git worktree add -b swarm-panel/NAME ROOT/NAME/tree HEAD`. The user's tree, index and
  branch are not touched.
- Uncommitted changes to tracked files are refused, with the files named: an agent's branch starts at a
  commit, so the changes would either be missing from its worktree or, stashed into its base, come back
  to the user as a commit of their own work at Apply, clashing with the same edits still in their tree.
  Untracked files are not in a worktree (they were never committed) and are not refused.
- A folder that is no repository is copied (up to COPY_LIMIT_BYTES); its repository, whose first commit
  is the base, is the workspace's own git folder beside the copy, out of the agent's reach. Apply writes
  the agent's changes back into the folder.

Either way the workspace gets its own git folder (app.workspace.reader), through which the host reads the
tree as data from then on.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from swarm_panel.app.workspace import reader
from swarm_panel.app.workspace.git import NameTaken, WorkspaceError, changed_paths, git, ok, out
from swarm_panel.app.workspace.records import COPY, WORKTREE, Workspace, default_root, save
from swarm_panel.app.workspace.snapshot import commit
from swarm_panel.runtime.core.careful_write import describe

log = logging.getLogger(__name__)

COPY_LIMIT_BYTES = 200 * 1024 * 1024  # a bigger folder is one to put under git, not to copy per agent
SHOWN_FILES = 5
BRANCH_PREFIX = "swarm-panel/"


def branch_of(name: str) -> str:
    return BRANCH_PREFIX + name


def create(folder: Path | str, name: str, root: Path | None = None, *,
           copy_limit: int = COPY_LIMIT_BYTES) -> Workspace:
    """The agent's new workspace; WorkspaceError (NameTaken for a name in use) with the reason otherwise."""
    root = root or default_root()
    folder, top = preflight(folder, copy_limit=copy_limit, root=root)
    if (root / name).exists():
        raise NameTaken(f"agent {name!r} already has a workspace in {root / name} (`swarm-panel agents list`)")
    return _copy(folder, name, root) if top is None else _worktree(folder, top, name, root)


def preflight(folder: Path | str, *, copy_limit: int = COPY_LIMIT_BYTES,
              root: Path | None = None) -> tuple[Path, Path | None]:
    """The folder resolved and its repository's top folder (None: it will be copied), or WorkspaceError
    with the reason no agent can start from it: checked before an engine loads for nothing."""
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise WorkspaceError(f"no such folder: {folder}")
    if not folder.is_dir():
        raise WorkspaceError(f"not a folder: {folder}")
    folder = folder.resolve()
    inside = git(folder, "rev-parse", "--is-inside-work-tree", check=False)
    if inside.returncode == 0 and inside.stdout.strip() == "true":
        top = Path(out(folder, "rev-parse", "--show-toplevel"))
        _check_repository(top)
        return folder, top
    if out_or_empty(folder, "rev-parse", "--is-bare-repository") == "true":
        raise WorkspaceError(f"{folder} is a bare repository: it has no working tree for agents to start from; "
                             "point them at a clone of it")
    if inside.returncode == 0:
        raise WorkspaceError(f"{folder} is inside a repository's .git folder: point the agents at its working tree")
    size = folder_size(folder, copy_limit, skip=(root or default_root()).resolve())
    if size > copy_limit:
        raise WorkspaceError(f"{folder} is not a git repository, so each agent would work on a copy of it, and it "
                             f"holds more than {copy_limit / 2**20:.0f} MiB: put it under git (git init && git add "
                             "-A && git commit) so agents get worktrees instead")
    return folder, None


def _check_repository(top: Path) -> None:
    if git(top, "symbolic-ref", "-q", "HEAD", check=False).returncode != 0:
        raise WorkspaceError(f"{top} has a detached HEAD: Apply merges an agent's branch into your current "
                             "branch, so check out a branch first (git switch NAME)")
    if not ok(top, "rev-parse", "--verify", "-q", "HEAD^{commit}"):
        raise WorkspaceError(f"{top} has no commit yet: an agent's branch starts from one; commit first")
    dirty = changed_paths(top, untracked=False)
    if dirty:
        files = ", ".join(dirty[:SHOWN_FILES]) + (" …" if len(dirty) > SHOWN_FILES else "")
        raise WorkspaceError(f"{top} has uncommitted changes ({files}): agents start from a commit, and Apply "
                             "would bring them back as a commit that clashes with your tree. Commit or stash "
                             "them first (git stash), then launch")


def out_or_empty(cwd: Path, *args: str) -> str:
    done = git(cwd, *args, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _worktree(folder: Path, top: Path, name: str, root: Path) -> Workspace:
    branch = branch_of(name)
    if ok(top, "show-ref", "--verify", "-q", f"refs/heads/{branch}"):
        raise NameTaken(f"the branch {branch} already exists in {top}: delete it (git branch -D {branch}) or "
                        "discard that agent (`swarm-panel agents discard NAME`)")
    current = out(top, "symbolic-ref", "--short", "HEAD")
    base = out(top, "rev-parse", "HEAD")
    relative = folder.relative_to(top)
    ws = Workspace(name, str(top), WORKTREE, "", branch, base, current, root=str(root))
    ws.folder = str(ws.tree / relative)
    _keep_record(ws)  # first: a crash while git works still leaves it listed
    try:
        git(top, "worktree", "add", "--quiet", "-b", branch, str(ws.tree), base)
        ws.common = out(top, "rev-parse", "--path-format=absolute", "--git-common-dir")
        reader.make(ws, out(top, "rev-parse", "--show-object-format"), Path(ws.common) / "info" / "exclude")
    except (WorkspaceError, OSError) as exc:
        git(top, "worktree", "remove", "--force", str(ws.tree), check=False)
        git(top, "branch", "-D", branch, check=False)
        shutil.rmtree(ws.home, ignore_errors=True)
        if isinstance(exc, OSError):
            raise WorkspaceError(f"cannot make agent {name}'s workspace in {ws.home} ({describe(exc)})") from exc
        raise
    save(ws)
    log.info("agent %s: worktree %s on %s from %s", name, ws.tree, branch, base[:12])
    return ws


def _copy(folder: Path, name: str, root: Path) -> Workspace:
    ws = Workspace(name, str(folder), COPY, "", branch_of(name), "", str(folder), root=str(root))
    ws.folder = str(ws.tree)
    _keep_record(ws)
    try:
        shutil.copytree(folder, ws.tree, symlinks=True, copy_function=shutil.copy2, ignore=_leave_out(root.resolve()))
        reader.make(ws)
        ws.base = commit(ws, reader.live_tree(ws), [], f"swarm-panel: copy of {folder}")
        reader.run(ws, "update-ref", f"refs/heads/{ws.branch}", ws.base)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(ws.home, ignore_errors=True)
        # copytree gathers each file's failure into one shutil.Error: the first one says why.
        errors = exc.args[0] if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) else []
        reason = errors[0][2] if errors else describe(exc)
        raise WorkspaceError(f"copying {folder} for agent {name} failed ({reason}): nothing was kept, and "
                             "your folder is untouched") from exc
    except WorkspaceError:
        shutil.rmtree(ws.home, ignore_errors=True)
        raise
    if not save(ws):
        shutil.rmtree(ws.home, ignore_errors=True)
        raise WorkspaceError(f"cannot write agent {name}'s record under {root}: nothing was kept")
    log.info("agent %s: %s is not a git repository; working on a copy in %s", name, folder, ws.tree)
    return ws


def _leave_out(root: Path):
    """copytree's ignore: the workspaces' own folder, where it lies inside the folder copied (a copy of itself)."""
    def ignore(parent: str, names: list[str]) -> set[str]:
        return {name for name in names if Path(parent, name) == root}
    return ignore


def folder_size(folder: Path, stop_past: int, skip: Path | None = None) -> int:
    """Bytes of the folder's files (links not followed, `skip` left out), counting no further than just past
    `stop_past`."""
    total = 0
    for parent, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if Path(parent, name) != skip]
        for file in files:
            try:
                total += os.lstat(os.path.join(parent, file)).st_size
            except OSError:
                continue
            if total > stop_past:
                return total
    return total


def _keep_record(ws: Workspace) -> None:
    try:
        ws.home.mkdir(parents=True)
    except FileExistsError as exc:
        raise NameTaken(f"agent {ws.name!r} already has a workspace in {ws.home}") from exc
    except OSError as exc:
        raise WorkspaceError(f"cannot make {ws.home} ({describe(exc)}): no agent was started") from exc
    if not save(ws):
        shutil.rmtree(ws.home, ignore_errors=True)
        raise WorkspaceError(f"cannot write agent {ws.name}'s record in {ws.home}: no agent was started")

