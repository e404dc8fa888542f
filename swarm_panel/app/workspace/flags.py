"""What review flags in an agent's change: what a line count hides.

- a symbolic link, shown with where it points; one that points outside the tree (absolute, climbing out
  with `..`, or into `.git`) is refused at Apply;
- a mode change (100644 -> 100755) and a new executable file;
- a submodule (a gitlink, mode 160000) and `.gitmodules`, which say what a recursive clone fetches;
- a `.gitattributes`, which chooses the filters, encodings and diff drivers git runs on checkout;
- a file that runs on its own: read and run by a tool without the user asking for that file, on push (CI),
  on commit (hook managers), on entering the folder (direnv) or on opening it (editor tasks, dev
  containers). A Makefile or package.json is left out: it runs when the user runs it, and the diff shows it.
"""

from __future__ import annotations

import posixpath

LINK, GITLINK, EXECUTABLE = "120000", "160000", "100755"
OUTSIDE = "link outside the tree"  # the flag Apply refuses

# Exact paths, and folders (ending in /) whose files all count, from the top of the tree; .envrc, and
# .gitattributes and .gitmodules, count in any folder (direnv runs one on entering its folder).
RUNS_ON_ITS_OWN = (
    ".github/workflows/", ".github/actions/", ".gitlab-ci.yml", ".gitlab/", ".circleci/", ".travis.yml",
    "azure-pipelines.yml", "bitbucket-pipelines.yml", "Jenkinsfile", ".buildkite/", ".drone.yml",
    ".husky/", ".githooks/", ".pre-commit-config.yaml", "lefthook.yml", ".lefthook.yml",
    ".vscode/tasks.json", ".vscode/settings.json", ".devcontainer/", ".idea/runConfigurations/",
)


def link_outside(path: str, target: str) -> bool:
    """Whether a link at `path` pointing at `target` leaves the tree (or enters its .git)."""
    if target.startswith("/") or not target:
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return resolved == ".." or resolved.startswith("../") or ".git" in resolved.split("/")


def runs_on_its_own(path: str) -> bool:
    return any(path == entry or (entry.endswith("/") and path.startswith(entry)) for entry in RUNS_ON_ITS_OWN)


def flags(path: str, old_mode: str, new_mode: str, link: str | None) -> tuple[str, ...]:
    """The flags of one changed file, as review prints them."""
    found = []
    if new_mode == LINK and link is not None:
        found.append(OUTSIDE if link_outside(path, link) else "link")
    if GITLINK in (old_mode, new_mode):
        found.append("submodule")
    elif old_mode and new_mode and old_mode != new_mode and LINK not in (old_mode, new_mode):
        found.append(f"mode {old_mode} -> {new_mode}")
    elif not old_mode and new_mode == EXECUTABLE:
        found.append("executable")
    name = posixpath.basename(path)
    if name == ".gitattributes":
        found.append("attributes")
    elif name == ".gitmodules":
        found.append("submodules")
    if runs_on_its_own(path) or name == ".envrc":
        found.append("runs on its own")
    return tuple(found)
