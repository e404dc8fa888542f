"""The server on a cache folder that cannot be written: read-only (or unmakeable) at start-up, and full or turned
read-only while it runs. It starts, answers every request, says once per folder what it will not remember, and
leaves no temp file behind."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import pytest

from swarm_panel.runtime.workloads.workload import system_text
from tests.faults.conftest import tmpfs
from tests.gateway_fleet import Proc, backend, free_port, wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HEAD_TOKENS = "64"  # the shortest head the prefix store keeps: every request below brings one


def ask(url: str, system: str, task: str = "fix the parser") -> dict:
    answer = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": "m", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": task}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] is not None
    return answer.json()


def lines(proc: Proc, text: str) -> list[str]:
    return [line for line in proc.text().splitlines() if text in line]


def wait_for_line(proc: Proc, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not (found := lines(proc, text)):
        assert time.monotonic() < deadline, f"no log line with {text!r}:\n{proc.text()[-3000:]}"
        time.sleep(0.1)
    return found[0]


def wait_for_files(folder: Path, pattern: str, timeout: float = 30) -> list[Path]:
    deadline = time.monotonic() + timeout
    while not (found := sorted(folder.rglob(pattern))):
        assert time.monotonic() < deadline, f"no {pattern} under {folder}"
        time.sleep(0.1)
    return found


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_serve_demo_starts_and_answers_on_a_read_only_cache_and_data_folder(tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("where the folders' parent should be")
    # The data folder cannot be made (a file stands where its parent should be); the cache is a read-only volume,
    # or where this machine lets no test mount one, a folder that cannot be made either: both refuse every write.
    with contextlib.ExitStack() as stack:
        try:
            cache = stack.enter_context(tmpfs(tmp_path / "cache", read_only=True)).path
        except pytest.skip.Exception:
            cache = blocker / "cache"
        _serve_demo(tmp_path, cache, blocker / "data", spare)
    assert blocker.is_file()


def _serve_demo(tmp_path: Path, cache: Path, data: Path, spare: Path) -> None:
    port = free_port()
    env = {"XDG_CACHE_HOME": str(cache), "XDG_DATA_HOME": str(data), "TMPDIR": str(spare)}
    proc = Proc(["serve", "--model", "demo", "--port", str(port), "--threads", "1", "--flash-attn", "on",
                 "--extra-buffers", "auto", "--prefix-store-min-tokens", HEAD_TOKENS], tmp_path, "serve", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        system = system_text(200)
        ask(url, system)
        ask(url, system, "add a test")
        wait_for_line(proc, "prefixes will be recomputed after a restart")
        ask(url, system_text(150), "another head")
    finally:
        proc.kill()
    for lost in ("probe verdicts will not be remembered", "the demo model is written to the temp folder instead",
                 "prefixes will be recomputed after a restart"):
        [line] = lines(proc, lost)  # said once, naming the folder and why
        assert "WARNING" in line and "cannot write in" in line
    assert "Traceback" not in proc.text()
    assert not cache.exists() or list(cache.iterdir()) == []
    [model] = spare.rglob("*.gguf")  # the demo model, in the temp folder for this run
    assert temp_files(spare) == [] and model.stat().st_size > 0


@pytest.fixture
def cache_volume(tmp_path, monkeypatch):
    """A 2 MB cache volume the server under test starts on."""
    with tmpfs(tmp_path / "cache", size="2m") as volume:
        monkeypatch.setenv("XDG_CACHE_HOME", str(volume.path))
        yield volume


def test_a_cache_volume_that_fills_then_turns_read_only_mid_run_costs_only_the_stored_prefixes(
        tiny_model_path, tmp_path, cache_volume):
    heads = [system_text(n) for n in (200, 150, 120)]
    with backend(tiny_model_path, tmp_path, "serve", 4, "--prefix-store-min-tokens", HEAD_TOKENS) as (url, proc):
        ask(url, heads[0])
        [stored] = wait_for_files(cache_volume.path, "*.prefix")

        cache_volume.fill()
        ask(url, heads[1])
        full = wait_for_line(proc, "prefixes will be recomputed after a restart")
        assert "the disk is full" in full and str(cache_volume.path) in full
        assert temp_files(cache_volume.path) == []

        cache_volume.read_only()
        ask(url, heads[2])
        reused = ask(url, heads[0], "a later session")  # the head stored before the disk filled serves on
        assert reused["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        time.sleep(0.5)  # the writer thread's last attempt
        assert temp_files(cache_volume.path) == []
        assert [p for p in cache_volume.path.rglob("*.prefix")] == [stored]
    assert len(lines(proc, "prefixes will be recomputed after a restart")) == 1
    assert "Traceback" not in proc.text()
