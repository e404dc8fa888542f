"""git on an agent's workspace as data: the host reads the tree an agent wrote and runs nothing it configured.

An agent can write anything in its tree, `.git` included: a worktree's gitfile replaced by a folder of its
own (config with core.fsmonitor, hooks, alternates), a copy's repository, `.gitattributes` naming filters
and encodings. So no call here lets git find a repository or read attributes in the tree:

- every call names its folders: GIT_DIR is the workspace's own git folder (`ROOT/NAME/git`, beside the
  tree, which no fence lets an agent write), GIT_WORK_TREE the tree only where the tree is read, and for a
  worktree GIT_OBJECT_DIRECTORY the user's repository's objects (a copy's live in its git folder). The
  tree's `.git` is never opened, and the user's repository's config is not read either;
- that folder's info/attributes unsets every attribute git acts on, and it outranks any `.gitattributes`
  (git 2.39 has no --attr-source): files are hashed byte for byte, no filter, textconv, encoding or eol
  conversion runs, and none can fail;
- the command line turns off what git would run from the user's global config: fsmonitor, hooks, auto
  gc and maintenance, fetching (protocol.allow=never), CRLF conversion.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from swarm_panel.app.workspace.git import QUIET, WorkspaceError, out
from swarm_panel.app.workspace.records import COPY, Workspace, save

log = logging.getLogger(__name__)

# `!name` leaves an attribute unspecified, as if no .gitattributes said anything of it; info/attributes
# is read first, so a tree's own lines cannot set them again (a macro such as `binary` included).
ATTRIBUTES_OFF = ("* !text !eol !crlf !filter !ident !working-tree-encoding !encoding !diff !merge "
                  "!conflict-marker-size !whitespace !export-ignore !export-subst !delta\n")
SAFE_CONFIG = ("core.fsmonitor=false", "core.untrackedCache=false", "core.hooksPath=/dev/null",
               "core.attributesFile=/dev/null", "core.autocrlf=false", "core.safecrlf=false",
               "core.splitIndex=false", "core.sparseCheckout=false", "core.sshCommand=false",
               "protocol.allow=never", "gc.auto=0", "maintenance.auto=false", "submodule.recurse=false",
               "advice.addEmbeddedRepo=false")
# What an inherited environment could point git at instead of the folders named here.
REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_EXTERNAL_DIFF", "GIT_ATTR_SOURCE",
             "GIT_REPLACE_REF_BASE", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_CEILING_DIRECTORIES")
INDEX = "index"


def safe_args() -> list[str]:
    return [arg for setting in SAFE_CONFIG for arg in ("-c", setting)]


def run(ws: Workspace, *args: str, tree: bool = False, index: Path | None = None, check: bool = True,
        text: bool = True) -> subprocess.CompletedProcess:
    """git on the workspace's own git folder; the tree is its work tree only where `tree` asks for it."""
    ensure(ws)
    env = {key: value for key, value in os.environ.items() if key not in REDIRECTS}
    env |= QUIET | {"GIT_DIR": str(ws.git_dir), "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_REPLACE_OBJECTS": "1",
                    "GIT_INDEX_FILE": str(index or ws.git_dir / INDEX)}
    if ws.mode != COPY:
        env["GIT_OBJECT_DIRECTORY"] = str(Path(ws.common) / "objects")
    if tree:
        env["GIT_WORK_TREE"] = str(ws.tree)
    # Its cwd is its own git folder: nothing relative resolves into the tree.
    try:
        done = subprocess.run(["git", *safe_args(), *args], cwd=ws.git_dir, capture_output=True, text=text,
                              check=False, env=env, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise WorkspaceError("git is not installed: agents' worktrees need it") from exc
    if check and done.returncode != 0:
        stderr = done.stderr if text else done.stderr.decode(errors="replace")
        command = next(a for i, a in enumerate(args) if a != "-c" and (i == 0 or args[i - 1] != "-c"))
        raise WorkspaceError(f"git {command} failed for agent {ws.name}: "
                             f"{stderr.strip() or done.returncode}")
    return done


def value(ws: Workspace, *args: str) -> str:
    return run(ws, *args).stdout.strip()


def make(ws: Workspace, object_format: str = "sha1", excludes: Path | None = None) -> None:
    """The workspace's git folder: bare, no template (no sample hooks), attributes off, and the user's
    info/exclude copied so files they ignore stay out of the agent's changes too."""
    done = subprocess.run(["git", *safe_args(), "init", "--quiet", "--bare", "--template=",
                           f"--object-format={object_format}", str(ws.git_dir)], capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k not in REDIRECTS} | QUIET)
    if done.returncode != 0:
        raise WorkspaceError(f"cannot make agent {ws.name}'s git folder {ws.git_dir}: {done.stderr.strip()}")
    info = ws.git_dir / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(ATTRIBUTES_OFF)
    if excludes is not None and excludes.is_file():
        shutil.copyfile(excludes, info / "exclude")


def ensure(ws: Workspace) -> None:
    """Its git folder, made for a worktree recorded before workspaces had one; a copy's old repository lies
    inside the tree its agent could write, so it cannot be read safely."""
    if ws.git_dir.is_dir():
        return
    if ws.mode == COPY:
        raise WorkspaceError(f"agent {ws.name}'s copy was made by an older swarm-panel, whose repository lies in "
                             f"the copy itself ({ws.tree / '.git'}), where the agent could rewrite it: compare "
                             f"the files by hand, then discard it (`swarm-panel agents discard {ws.name}`)")
    source = Path(ws.source)
    if not source.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s repository {source} is gone; discard it")
    ws.common = out(source, "rev-parse", "--path-format=absolute", "--git-common-dir")
    make(ws, out(source, "rev-parse", "--show-object-format"), Path(ws.common) / "info" / "exclude")
    save(ws)


def live_tree(ws: Workspace) -> str:
    """The tree object of what its tree holds now (its ignored files left out), written to the objects.

    `git add -A` reads the files through a copy of the workspace's own index, whose stat data spares
    rehashing what did not change; the copy then replaces it, so the next read is as quick. A nested
    repository without a commit cannot be added: --ignore-errors leaves it out rather than failing review.
    """
    if not ws.tree.is_dir():
        raise WorkspaceError(f"agent {ws.name}'s worktree {ws.tree} is gone; discard it (`swarm-panel agents "
                             f"discard {ws.name}`)")
    ensure(ws)
    fd, scratch = tempfile.mkstemp(dir=ws.git_dir, prefix="index-", suffix=".swarm-panel")
    os.close(fd)
    index = Path(scratch)
    try:
        if (ws.git_dir / INDEX).exists():
            shutil.copyfile(ws.git_dir / INDEX, index)
        else:  # the base's files, so one the user ignores yet committed stays in (a copy's first read: none)
            index.unlink()
            if ws.base:
                run(ws, "read-tree", ws.base, index=index)
        added = run(ws, "add", "-A", "--ignore-errors", tree=True, index=index, check=False)
        if added.returncode not in (0, 1):
            raise WorkspaceError(f"cannot read agent {ws.name}'s tree {ws.tree}: {added.stderr.strip()}")
        if added.returncode == 1:
            log.info("agent %s: left out of its tree's reading: %s", ws.name, added.stderr.strip())
        tree = run(ws, "write-tree", index=index).stdout.strip()
        os.replace(index, ws.git_dir / INDEX)
        return tree
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
