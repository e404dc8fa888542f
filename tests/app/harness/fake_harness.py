"""A stand-in harness for the tests: a Python script configured as Qwen Code is (OPENAI_* variables, the
task last on its command line), so launching, naming by base URL and turn counting run for real with no
harness installed. The task picks what it does:

- anything but the words below: one chat request to the base URL it was given, its reply printed, exit 0;
- "hang": starts a child, both ignore SIGTERM, and sleeps (a stop must kill the whole group);
- "fail": complains on stderr and exits 3;
- "quiet": says "done" and exits 0 without a request (no server needed);
- "slow": as "quiet", two seconds later;
- "edit": adds two lines to hello.py in its working folder and exits 0 without a request.
"""

from __future__ import annotations

import sys
from pathlib import Path

from swarm_panel.app.harness.kinds import HarnessKind

SCRIPT = '''\
import json, os, signal, subprocess, sys, time, urllib.request

task = sys.argv[-1]
if "--version" in sys.argv:
    print("fake-agent 9.9.9")
    sys.exit(0)
print("home=" + os.environ["HOME"], flush=True)
if task == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Its home on the child's command line: the test finds it by that, in the fence's pid namespace or not.
    child = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
                              os.environ["HOME"]])
    print("hanging", flush=True)
    time.sleep(600)
elif task in ("quiet", "slow"):
    time.sleep(2 if task == "slow" else 0)
    print("done")
elif task == "edit":
    with open("hello.py", "a") as f:
        f.write("print('and more')\\nprint('and again')\\n")
    print("edited")
elif task == "fail":
    print("fake-agent: cannot do that", file=sys.stderr)
    sys.exit(3)
else:
    # A harness's long system prompt, the same in every session.
    system = "You are a fake coding agent. Read files, run tools, answer briefly. " * 20
    body = {"model": os.environ["OPENAI_MODEL"], "max_tokens": 8,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": task}]}
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json",
                                      "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    reply = json.load(urllib.request.urlopen(request, timeout=120))
    print("answer: " + reply["choices"][0]["message"]["content"].strip())
'''


def fake_kind(folder: Path, key: str = "fake-agent") -> HarnessKind:
    """A kind whose executable is the script above, written into `folder`."""
    script = folder / f"{key}.py"
    script.write_text(f"#!{sys.executable}\n{SCRIPT}")
    script.chmod(0o755)
    return HarnessKind(key, "Fake agent", str(script), "pip install fake-agent", "chat", 1_000, recipe="qwen-code")


def missing_kind() -> HarnessKind:
    return HarnessKind("missing-agent", "Missing agent", "swarm-panel-no-such-harness",
                       "npm install -g missing-agent", "chat", 2_000)
