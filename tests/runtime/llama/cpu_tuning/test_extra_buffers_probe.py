"""The extra-buffer-types probe: a child that crashes or disagrees turns them off, and the engine says so."""

from __future__ import annotations

import json
import os
import shutil
import sys
from unittest.mock import ANY

import pytest

from swarm_panel.runtime.core.engine import engine_meta
from swarm_panel.runtime.llama.cpu_tuning import extra_buffers_probe as probe
from swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe import decide_extra_buffers


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


CRASH = _child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
DISAGREE = _child("print('{\"relative_gap\": 0.9, \"same_tokens\": false}')")
AGREE = _child("print('{\"relative_gap\": 0.001, \"same_tokens\": true}')")


def test_a_crashing_probe_turns_them_off_and_says_why(tmp_path, tiny_model_path):
    decision = decide_extra_buffers(tiny_model_path, "auto", cache_path=tmp_path / "c.json", command=CRASH)
    assert decision.enabled is False
    assert "crashed with signal 11" in decision.reason


def test_a_disagreeing_probe_turns_them_off(tmp_path, tiny_model_path):
    decision = decide_extra_buffers(tiny_model_path, "auto", cache_path=tmp_path / "c.json", command=DISAGREE)
    assert decision.enabled is False and "disagree" in decision.reason


def test_an_agreeing_probe_turns_them_on_and_the_verdict_is_remembered(tmp_path, tiny_model_path):
    cache = tmp_path / "c.json"
    assert decide_extra_buffers(tiny_model_path, "auto", cache_path=cache, command=AGREE).enabled is True
    # A second decision must not run the child again: a crashing command would turn them off.
    again = decide_extra_buffers(tiny_model_path, "auto", cache_path=cache, command=CRASH)
    assert again.enabled is True and "remembered" in again.reason
    records = json.loads(cache.read_text())
    assert list(records) == [probe.machine_key()]


def test_verdicts_for_deleted_or_rewritten_files_are_dropped_when_one_is_written(tmp_path, tiny_model_path):
    cache = tmp_path / "c.json"
    gone, rewritten = tmp_path / "gone.gguf", tmp_path / "rewritten.gguf"
    for path in (gone, rewritten):
        shutil.copyfile(tiny_model_path, path)
        decide_extra_buffers(path, "auto", cache_path=cache, command=AGREE)
    old_build = {"old-build": {probe.model_key(rewritten): {"enabled": True, "reason": "x"}}}
    cache.write_text(json.dumps({**json.loads(cache.read_text()), **old_build}))
    gone.unlink()
    stat = rewritten.stat()
    os.utime(rewritten, (stat.st_atime, stat.st_mtime + 10))

    decide_extra_buffers(tiny_model_path, "auto", cache_path=cache, command=AGREE)

    records = json.loads(cache.read_text())
    assert records == {probe.machine_key(): {probe.model_key(tiny_model_path): {"enabled": True, "reason": ANY}}}
    # The rewritten file gets a fresh probe, not its old verdict.
    assert "remembered" not in decide_extra_buffers(rewritten, "auto", cache_path=cache, command=AGREE).reason


def test_the_setting_overrides_the_probe(tmp_path, tiny_model_path):
    assert decide_extra_buffers(tiny_model_path, "on", command=CRASH).enabled is True
    assert decide_extra_buffers(tiny_model_path, "off", command=AGREE).enabled is False
    with pytest.raises(ValueError, match="extra_buffers"):
        decide_extra_buffers(tiny_model_path, "maybe")


def test_a_probe_that_prints_nothing_useful_is_a_no(tmp_path, tiny_model_path):
    decision = decide_extra_buffers(tiny_model_path, "auto", cache_path=tmp_path / "c.json",
                                    command=_child("print('hello')"))
    assert decision.enabled is False and "no verdict" in decision.reason


def test_the_engine_loads_with_them_off_when_the_probe_child_dies(tmp_path, tiny_model_path, monkeypatch):
    from swarm_panel.app.service.engine_factory import build_engine

    monkeypatch.setattr(probe, "cache_file", lambda: tmp_path / "c.json")
    monkeypatch.setattr(probe, "probe_command", lambda path: CRASH)
    engine = build_engine("llama", realtime=True, max_lanes=2, model=tiny_model_path, n_ctx=512, threads=1,
                          extra_buffers="auto")
    try:
        facts = engine_meta(engine)
        assert engine.extra_buffers is False and facts["extra_buffers"] is False
        assert "crashed" in facts["extra_buffers_reason"]
    finally:
        engine.close()


def test_the_real_probe_gives_a_consistent_verdict_on_this_machine(tmp_path, real_model_path):
    """On a CPU whose extra buffers work the child agrees; where they crash (AMX here) it dies: either
    way the verdict must be a clear on or off, never an exception or a crash of this process."""
    decision = decide_extra_buffers(real_model_path, "auto", cache_path=tmp_path / "c.json")
    assert decision.enabled is ("probe passed" in decision.reason)
    assert decision.reason.endswith(": on") or decision.reason.endswith(": off")
