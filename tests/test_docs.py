"""The docs stay true to the code: the architecture page names every room and only rooms, and every
`swarm-panel` command the README shows parses as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from swarm_panel.ui.shell.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_the_architecture_page_lists_every_room():
    rooms = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "swarm_panel").rglob("__init__.py")}
    named = set(re.findall(r"^- `(swarm_panel[a-z_.]*)`", _section(ROOT / "docs" / "architecture.md", "Rooms"), re.M))
    assert sorted(rooms - named) == [], "rooms docs/architecture.md does not name"
    assert sorted(named - rooms) == [], "rooms docs/architecture.md names that do not exist"


def test_the_architecture_page_names_every_module():
    text = _section(ROOT / "docs" / "architecture.md", "Rooms")
    # A module is named by its own name in backticks, alone or at the end of a dotted path.
    named = set(re.findall(r"`(?:[a-z_]+\.)*([a-z_]+)`", text))
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "swarm_panel").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and p.stem not in named}
    assert sorted(modules) == [], "modules docs/architecture.md's rooms do not name"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"\s*&&\s*|\s*;\s*", line):
                if part.startswith("swarm-panel"):
                    commands.append(part)
    return commands


def test_the_readme_shows_commands():
    assert len(_readme_commands()) >= 3


@pytest.mark.parametrize("command", _readme_commands())
def test_every_readme_command_parses_as_written(command):
    words = shlex.split(command)[1:]
    try:
        build_parser().parse_args(words)
    except SystemExit as exc:
        assert exc.code == 0, f"`{command}` does not parse"


def test_the_settings_page_is_what_the_fields_generate():
    from swarm_panel.app.cli.settings_reference import page

    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert text == page(text), "run: python -m swarm_panel.app.cli.settings_reference"


# Commands that run to their end on any machine in moments; the rest (the panel, servers, the real
# model's bench) are left to the tests of those commands.
QUICK = ("swarm-panel bench", "swarm-panel bench --json")


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in _readme_commands() if c.split("#")[0].strip() in QUICK])
def test_the_quick_readme_commands_run_as_written(command):
    words = shlex.split(command)
    result = subprocess.run([sys.executable, "-m", "swarm_panel", *words[1:]], capture_output=True, text=True,
                            timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_readme_serve_and_curl_answer_as_written(tmp_path):
    """`swarm-panel serve` as the README writes it (the port from SWARM_PANEL_PORT, so no flag changes),
    then the README's curl command against it: a real chat answer from the bundled model."""
    serve = next(c for c in _readme_commands() if c.split("#")[0].strip() == "swarm-panel serve")
    curl = next(line for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                for line in block.splitlines() if line.startswith("curl ") and "localhost:8000" in line)
    port = _free_port()
    env = os.environ | {"SWARM_PANEL_PORT": str(port), "SWARM_PANEL_CONFIG_FILE": str(tmp_path / "absent.toml")}
    proc = subprocess.Popen([sys.executable, "-m", "swarm_panel", *shlex.split(serve)[1:]], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        words = shlex.split(curl.replace("localhost:8000", f"localhost:{port}"))
        if shutil.which("curl"):
            reply = json.loads(subprocess.run(words, capture_output=True, text=True, timeout=120, check=True).stdout)
        else:  # the same request, where the machine has no curl
            url = next(w for w in words if w.startswith("localhost:"))
            reply = httpx.post(f"http://{url}", json=json.loads(words[words.index("-d") + 1]), timeout=120).json()
        choice = reply["choices"][0]
        assert choice["finish_reason"] in {"stop", "length"} and choice["message"]["content"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)


def test_the_memory_plans_worked_example_is_what_the_plan_computes():
    """docs/memory-plan.md's both-ways table for Qwen3.5-9B on 16 GiB, row by row."""
    from swarm_panel.app.service.plan_report import DEFAULT_CARD_RESERVE
    from swarm_panel.runtime.planning.memory_plan import GIB, longest_context, most_lanes
    from swarm_panel.runtime.planning.shape import QWEN35_9B

    rows = re.findall(r"^\| (f16|q8_0|q4_0) \| (\d+) \| ([\d,]+) \|$", (ROOT / "docs" / "memory-plan.md").read_text(), re.M)
    assert [kv for kv, _, _ in rows] == ["f16", "q8_0", "q4_0"]
    for kv_type, lanes, context in rows:
        kw = {"kv_type": kv_type, "flash_attn": True, "reserve": DEFAULT_CARD_RESERVE}
        assert int(lanes) == most_lanes(QWEN35_9B, 32768, 16 * GIB, **kw)
        assert int(context.replace(",", "")) == longest_context(QWEN35_9B, 8, 16 * GIB, **kw)
