"""While the engine loads, the panel says which start-up stage it is in and shows the knobs it will run."""

from __future__ import annotations

from tests.ui.test_ui_common import fast_service, no_user_config  # noqa: F401


def test_while_the_engine_loads_the_panel_shows_the_stage_and_the_knobs_it_will_run(qtbot, no_user_config, tmp_path):
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    service = fast_service(num_lanes=6, prefill_chunk=128)
    win = MainWindow(service, SettingsStore(tmp_path / "panel.ini"))
    qtbot.addWidget(win)
    assert (win.controls.num_lanes.value(), win.controls.prefill_chunk.value()) == (6, 128)
    win._loading = True
    service.startup = ("loading the weights of model.gguf", 0.42)
    win.refresh()
    assert "Loading the weights of model.gguf (42%)" == win.engine_panel.status.text()
    assert win.engine_panel.progress.value() == 42
    assert win.status.currentMessage() == "Starting: loading the weights of model.gguf (42%)"
    service.startup = ("timing both attention kernels on this CPU", None)
    win.refresh()
    assert win.engine_panel.status.text().startswith("Timing both attention kernels")
    assert win.engine_panel.progress.maximum() == 0
