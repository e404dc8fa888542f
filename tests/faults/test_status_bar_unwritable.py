"""The panel's status bar says once, per folder, that it cannot write there and what it keeps only in memory,
whichever thread's write failed (the engine's, the prefix store's writer)."""

from __future__ import annotations

import threading

import pytest

from swarm_panel.runtime.core.careful_write import write_file


def failing_write_on_another_thread(folder, lost: str) -> None:
    thread = threading.Thread(target=write_file, args=(folder / "f.json", b"{}"), kwargs={"lost": lost})
    thread.start()
    thread.join()


def test_the_status_bar_says_once_per_folder_what_is_not_remembered(qtbot, tmp_path, inject):
    from swarm_panel.ui.shell.status_bar import StatusBar

    bar = StatusBar()
    qtbot.addWidget(bar)
    assert bar.unwritable.isHidden()
    cache = inject.read_only(tmp_path / "cache")
    cache.mkdir()
    failing_write_on_another_thread(cache, "probe verdicts will not be remembered")
    qtbot.waitUntil(lambda: not bar.unwritable.isHidden(), timeout=5000)
    shown = bar.unwritable.text()
    assert str(cache) in shown and "probe verdicts will not be remembered" in shown and "read-only" in shown
    failing_write_on_another_thread(cache, "prefixes will be recomputed after a restart")
    qtbot.wait(50)
    assert bar.unwritable.text() == shown  # once per folder

    data = inject.full(tmp_path / "data")
    data.mkdir()
    failing_write_on_another_thread(data, "the demo model is written to the temp folder instead")
    qtbot.waitUntil(lambda: "1 more folders" in bar.unwritable.text(), timeout=5000)
    assert str(cache) in bar.unwritable.toolTip() and str(data) in bar.unwritable.toolTip()


def test_a_status_bar_opened_after_the_failure_still_says_it(qtbot, tmp_path, inject):
    from swarm_panel.ui.shell.status_bar import StatusBar

    cache = inject.read_only(tmp_path / "cache")
    cache.mkdir()
    write_file(cache / "f.json", b"{}", lost="probe verdicts will not be remembered")
    bar = StatusBar()
    qtbot.addWidget(bar)
    assert not bar.unwritable.isHidden() and str(cache) in bar.unwritable.text()


@pytest.mark.slow
def test_the_panel_opens_on_a_read_only_cache_and_says_so_once(qtbot, tmp_path, monkeypatch, inject, tiny_model_path):
    from swarm_panel.app.service.engine_service import SwarmService
    from swarm_panel.app.settings.schema import Settings
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    cache = inject.read_only(tmp_path / "cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    settings = Settings(engine="llama", model=tiny_model_path, port=0, threads=1, extra_buffers="auto",
                        flash_attn="on", n_ctx=2048)
    service = SwarmService(settings)
    window = MainWindow(service, SettingsStore(tmp_path / "panel.ini"))
    qtbot.addWidget(window)
    window.show()
    try:
        with qtbot.waitSignal(window.engine_loaded, timeout=120_000) as loaded:
            window.start_engine()
        assert loaded.args == [None]  # loaded, no error
        qtbot.waitUntil(lambda: not window.status.unwritable.isHidden(), timeout=5000)
        shown = window.status.unwritable.text()
        assert "probe verdicts will not be remembered" in shown and str(cache / "swarm-panel") in shown
        assert list(cache.iterdir()) == [] or all(p.is_dir() for p in cache.rglob("*"))
    finally:
        window.close()
        service.stop()
