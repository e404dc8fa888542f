"""Reloading the engine keeps every scheduler knob the user changed live."""

from __future__ import annotations

from swarm_panel.app.settings.schema import Settings
from tests.app.server.test_server_common import modeled_service


def test_reload_keeps_the_prefix_cache_off(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    service = modeled_service()
    service.start()
    try:
        service.engine_thread.reconfigure(prefix_cache=False, admission_wait_s=0.5, num_lanes=3)
        service.reload(profile=service.settings.profile)
        config = service.engine_thread.config
        assert config.prefix_cache is False
        assert (config.admission_wait_s, config.num_lanes) == (0.5, 3)
    finally:
        service.stop()


def test_reload_keeps_agent_priorities_and_a_change_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    service = modeled_service()
    service.start()
    try:
        service.engine_thread.reconfigure(agent_priorities={"coordinator": -1}, prefix_cache=False)
        service.reload(prefix_cache=True)
        config = service.engine_thread.config
        assert dict(config.agent_priorities) == {"coordinator": -1}
        assert config.prefix_cache is True
    finally:
        service.stop()


def test_unload_then_load_keeps_the_live_knobs(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    service = modeled_service()
    service.start()
    service.engine_thread.reconfigure(prefix_cache=False, policy="shrinking")
    service.stop()
    assert (service.settings.prefix_cache, service.settings.policy) == (False, "shrinking")
    service.start()
    try:
        assert (service.engine_thread.config.prefix_cache, service.engine_thread.config.policy) == (False, "shrinking")
    finally:
        service.stop()


def test_a_live_knob_beyond_the_settings_bounds_does_not_stop_the_stop(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    service = modeled_service()
    service.start()
    service.engine_thread.reconfigure(prefill_chunk=1 << 20)
    service.stop()
    assert not service.loaded and service.settings.prefill_chunk == Settings.model_fields["prefill_chunk"].default
