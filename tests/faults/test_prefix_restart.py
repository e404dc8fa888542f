"""The server SIGKILLed while a prefix file is being written, then restarted: every stored prefix it finds is
whole and used, or discarded with a warning; never half-used. What a killed writer left goes at the next load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from swarm_panel.runtime.workloads.workload import system_text
from tests.faults.test_cache_volume import HEAD_TOKENS, ask, lines, temp_files, wait_for_files
from tests.faults.test_damaged_files import KILLED_MID_WRITE
from tests.gateway_fleet import backend

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def serve(model, tmp_path, name: str):
    return backend(model, tmp_path, name, 4, "--prefix-store-min-tokens", HEAD_TOKENS)


def test_a_server_killed_mid_write_restarts_on_whole_prefixes_only(tiny_model_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    head, other_head = system_text(200), system_text(150)
    with serve(tiny_model_path, tmp_path, "first") as (url, proc):
        ask(url, head)
        [stored] = wait_for_files(cache, "*.prefix")
        ask(url, other_head)  # its file is being written, or is written, or not yet begun, as the kill lands
        proc.kill()
    folder = stored.parent
    # What a writer killed mid-write leaves (a temp file, half written), and a half file under a final name
    # (as a writer that did not write atomically would leave): neither may ever be used.
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(folder / ("0" * 32 + ".prefix"))],
                            env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert killed.returncode == -signal.SIGKILL and len(temp_files(folder)) == 1
    half = folder / ("1" * 32 + ".prefix")
    half.write_bytes(stored.read_bytes()[: stored.stat().st_size // 2])

    with serve(tiny_model_path, tmp_path, "second") as (url, proc):
        reused = ask(url, head, "a later session")
        again = ask(url, other_head, "a later session")
    assert reused["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert again["usage"]["prompt_tokens"] > 0
    [left] = lines(proc, "left by a writer that died")
    assert "WARNING" in left
    [discarded] = lines(proc, "is not loaded and goes")
    assert half.name in discarded and "truncated" in discarded
    assert temp_files(cache) == [] and not half.exists()
    assert stored.exists() and not (folder / ("0" * 32 + ".prefix")).exists()
    assert "Traceback" not in proc.text()
