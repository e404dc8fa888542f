"""Every file the program writes, on a full and on a read-only disk: the write is skipped with one warning that
names the folder and what is lost, the program carries on, and no temp file is left behind.

Each path runs on a real 2 MB tmpfs (filled, or mounted read-only) where this machine lets a test mount one, and
with the same fault injected (ENOSPC once the temp file exists, EROFS at once) everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from swarm_panel.runtime.core import careful_write
from tests.faults.conftest import tmpfs

FAULTS = ["injected-full", "injected-read-only", "tmpfs-full", "tmpfs-read-only"]


# A writer that opens the file itself (llama.cpp's quantizer, gguf's) writes past the injected temp file: only a
# real full volume, or a folder refusing the temp file, stops it.
WHOLE_FILE_FAULTS = ["injected-read-only", "tmpfs-full", "tmpfs-read-only"]


@contextlib.contextmanager
def broken_folder(fault: str, tmp_path: Path, inject):
    """A folder every write in fails, as `fault` says."""
    how, _, kind = fault.partition("-")
    if how == "injected":
        folder = tmp_path / "broken"
        folder.mkdir()
        yield inject.full(folder) if kind == "full" else inject.read_only(folder)
        return
    with tmpfs(tmp_path / "broken", read_only=kind == "read-only") as volume:
        if kind == "full":
            volume.fill()
        yield volume.path


@pytest.fixture(params=FAULTS)
def broken(request, tmp_path, inject):
    with broken_folder(request.param, tmp_path, inject) as folder:
        yield folder


def leftovers(folder: Path) -> list[str]:
    """What is on disk under `folder` besides a filler: nothing a failed write made."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "filler")


def warnings_about(caplog, lost: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and lost in r.getMessage()]


def test_a_failed_write_is_one_warning_per_folder_and_no_temp_file(broken, caplog):
    told = []
    stop = careful_write.on_unwritable(lambda folder, message: told.append((folder, message)))
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                written = careful_write.write_file(broken / "a.json", b"{}" * 4096, lost="x will not be remembered")
                assert written is False
    finally:
        stop()
    [warning] = warnings_about(caplog, "x will not be remembered")
    assert str(broken) in warning and ("read-only" in warning or "disk is full" in warning)
    assert [folder for folder, _ in told] == [broken] and broken in careful_write.unwritable_folders()
    assert leftovers(broken) == []


def test_probe_verdicts_are_kept_for_the_run_only(broken, tiny_model_path, caplog):
    from swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe import decide_extra_buffers

    verdict = json.dumps({"relative_gap": 0.001, "same_tokens": True})
    with caplog.at_level(logging.WARNING):
        decision = decide_extra_buffers(tiny_model_path, "auto", cache_path=broken / "swarm-panel" / "eb.json",
                                        command=[sys.executable, "-c", f"print({verdict!r})"])
    assert decision.enabled and "probe passed" in decision.reason
    assert len(warnings_about(caplog, "probe verdicts will not be remembered")) == 1
    assert leftovers(broken) == []


def test_the_flash_attention_verdict_is_kept_for_the_run_only(broken, caplog):
    from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import FlashAttnDecision, ProbeLayout, _remember

    decision = FlashAttnDecision("on", "timed faster")
    with caplog.at_level(logging.WARNING):
        kept = _remember(broken / "fa.json", "cpu", "model", ProbeLayout(4096, 4, True), decision, None)
    assert kept.setting == "on"
    assert len(warnings_about(caplog, "probe verdicts will not be remembered")) == 1
    assert leftovers(broken) == []


def test_a_prefix_not_stored_leaves_no_temp_file(broken, caplog):
    import ctypes

    from swarm_panel.runtime.reuse.stored_files import PrefixFiles

    files = PrefixFiles(broken / "prefix-store", {"model": "m"}, disk_budget_bytes=1 << 30)
    state = (ctypes.c_uint8 * (256 * 1024))(*range(256)) # more than a full volume's last blocks
    with caplog.at_level(logging.WARNING):
        files.write(np.arange(64), state)
        files.write(np.arange(65), state)
        files.close()
    assert len(warnings_about(caplog, "prefixes will be recomputed")) == 1
    assert leftovers(broken) == []
    assert files.index() == []


@pytest.mark.parametrize("fault", WHOLE_FILE_FAULTS)
def test_the_demo_model_goes_to_the_temp_folder_where_the_data_folder_cannot_be_written(fault, tmp_path, inject,
                                                                                          monkeypatch, caplog):
    from swarm_panel.runtime.models.demo import ensure_demo_model

    with broken_folder(fault, tmp_path, inject) as data:
        monkeypatch.setenv("XDG_DATA_HOME", str(data))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "spare"))
        (tmp_path / "spare").mkdir()
        with caplog.at_level(logging.WARNING):
            path = ensure_demo_model("tiny")
        assert path.is_file() and tmp_path / "spare" in path.parents
        assert len(warnings_about(caplog, "the demo model is written to the temp folder instead")) == 1
        assert leftovers(data) == []
        assert ensure_demo_model("tiny") == path  # written once, found again


@pytest.mark.parametrize("fault", WHOLE_FILE_FAULTS)
def test_the_bundled_model_is_served_as_shipped_where_its_copy_cannot_be_written(fault, tmp_path, inject, caplog):
    from swarm_panel.runtime.models.bundled import bundled_model_path, cpu_copy

    with broken_folder(fault, tmp_path, inject) as data:
        with caplog.at_level(logging.WARNING):
            assert cpu_copy(bundled_model_path(), data / "copy.F16.gguf") is None
        assert len(warnings_about(caplog, "is served as shipped")) == 1
        assert leftovers(data) == []


def test_a_harness_whose_home_cannot_be_written_fails_to_start_with_its_reason(broken, tmp_path):
    from swarm_panel.app.harness.launcher import FAILED, Launcher
    from tests.app.harness.fake_harness import fake_kind

    kind = fake_kind(tmp_path)
    launcher = Launcher(state_dir=broken / "state", unconfined=True)  # where no fence runs here
    [run] = asyncio.run(launcher.start(kind, tmp_path, "http://127.0.0.1:9"))
    assert run.status == FAILED and run.process is None
    assert "cannot write" in run.error or "Read-only" in run.error or "No space" in run.error, run.error
    assert leftovers(broken) == []


def test_an_export_that_cannot_be_written_says_why_and_leaves_nothing(broken):
    from swarm_panel.app.service.step_feed import StepFeed
    from swarm_panel.runtime.serving.metrics import MetricsAggregator
    from swarm_panel.ui.shell.export import export_figures

    for name in ("figures.json", "figures.csv"):
        with pytest.raises(OSError, match="could not write .*" + name):
            export_figures(broken / name, MetricsAggregator().snapshot(), StepFeed(), {})
    assert leftovers(broken) == []


@pytest.mark.parametrize("fault", WHOLE_FILE_FAULTS)
def test_a_png_export_that_cannot_be_written_says_why_and_leaves_nothing(fault, tmp_path, inject, qtbot):
    from PySide6 import QtWidgets

    from swarm_panel.ui.shell.export import export_png

    widget = QtWidgets.QLabel("plots")
    qtbot.addWidget(widget)
    with broken_folder(fault, tmp_path, inject) as folder:
        with pytest.raises(OSError, match="could not write"):
            export_png(folder / "plots.png", widget)
        assert leftovers(folder) == []
    written = export_png(tmp_path / "plots.png", widget)
    assert written.read_bytes().startswith(b"\x89PNG")
