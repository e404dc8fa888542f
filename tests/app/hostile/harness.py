"""A hostile stand-in harness: launched through the real launcher and fence like any harness, it runs the
Python code its task carries and prints one JSON line of what it saw (the `seen` dict the code fills).

Configured as Qwen Code is (the task last on its command line, the base URL and key in OPENAI_*), so the
launcher treats it as a real agent. The code runs with `seen`, `json`, `os`, `sys`, `subprocess`, `socket`,
`time` and `name` (its agent name, from its base URL) in scope; an exception is caught and reported as
seen["error"], so a test asserts what the attack achieved, never a traceback.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from swarm_panel.app.harness.kinds import HarnessKind

SCRIPT = '''\
import json, os, socket, subprocess, sys, time

code = json.loads(sys.argv[-1])["code"]
base = os.environ.get("OPENAI_BASE_URL", "")
name = base.split("/agents/")[1].split("/")[0] if "/agents/" in base else ""
seen = {}
try:
    exec(code, {"seen": seen, "json": json, "os": os, "sys": sys, "subprocess": subprocess, "socket": socket,
                "time": time, "name": name})
except BaseException as exc:  # the attack's own failure is what the test reads
    seen["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(seen, default=str), flush=True)
'''


def hostile_kind(folder: Path) -> HarnessKind:
    """The stand-in's kind, its script written into `folder` (which the fence re-exposes as its install)."""
    script = folder / "hostile-agent.py"
    script.write_text(f"#!{sys.executable}\n{SCRIPT}")
    script.chmod(0o755)
    return HarnessKind("hostile", "Hostile stand-in", str(script), "-", "chat", 100, recipe="qwen-code")


def attack(code: str) -> str:
    """The task that makes the stand-in run `code` (dedented)."""
    return json.dumps({"code": textwrap.dedent(code)})


def seen(run) -> dict:
    """What the stand-in reported (the last JSON line it printed)."""
    lines = [line for line in run.stdout.text.splitlines() if line.startswith("{")]
    assert lines, f"the stand-in printed no report; stderr: {run.stderr.text[-2000:]}"
    return json.loads(lines[-1])
