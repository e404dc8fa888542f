"""A scripted stand-in harness, launched through the same launcher (and fence) as the real ones, configured as
Qwen Code is (the task last on its command line) unless told otherwise. Its task is JSON saying what to do in its folder:

- "write": {path: text} new or replaced files ("{name}" in a text: its agent name, from its base URL);
- "delete": [path]; "sleep": seconds before it exits;
- "outside": [path] files it tries to write outside its worktree: it prints, for each, "wrote" or why not.
It prints one JSON line: its folder, what happened outside, whether it could write its temp folder (TMPDIR),
and its argv (the recipe's permissions).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from swarm_panel.app.harness.kinds import HarnessKind

SCRIPT = '''\
import json, os, sys, time

task = json.loads(sys.argv[sys.argv.index("--message") + 1] if "--message" in sys.argv else sys.argv[-1])
base = os.environ.get("OPENAI_BASE_URL") or sys.argv[sys.argv.index("--openai-api-base") + 1]  # aider's
name = base.split("/agents/")[1].split("/")[0]
for path, text in task.get("write", {}).items():
    with open(path, "w") as f:
        f.write(text.replace("{name}", name))
for path in task.get("delete", []):
    os.remove(path)
outside = {}
for path in task.get("outside", []):
    try:
        with open(path, "w") as f:
            f.write("written by a stand-in agent")
        outside[path] = "wrote"
    except OSError as exc:
        outside[path] = exc.strerror
try:  # its temp folder, wherever the fence puts it
    with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "stand-in-scratch"), "w") as f:
        f.write("scratch")
    tmp = "wrote"
except OSError as exc:
    tmp = exc.strerror
print(json.dumps({"cwd": os.getcwd(), "outside": outside, "tmp": tmp, "argv": sys.argv[1:]}), flush=True)
time.sleep(task.get("sleep", 0))
'''


def stand_in_kind(folder: Path, recipe: str = "qwen-code") -> HarnessKind:
    """The stand-in, configured as `recipe` configures its harness (aider's: the task after --message)."""
    script = folder / "stand-in.py"
    script.write_text(f"#!{sys.executable}\n{SCRIPT}")
    script.chmod(0o755)
    return HarnessKind("stand-in", "Stand-in", str(script), "-", "chat", 100, recipe=recipe)


def task(**what) -> str:
    return json.dumps(what)


def report(run) -> dict:
    """The JSON line the stand-in printed."""
    line = next(line for line in run.stdout.text.splitlines() if line.startswith("{"))
    return json.loads(line)
