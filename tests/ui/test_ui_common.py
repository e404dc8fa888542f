"""Shared pieces of the panel tests (this module holds no tests itself)."""

from __future__ import annotations

import pytest

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B

# The article's card at a twentieth of the cost: a naive batch of short agents drains in a fraction of a second.
FAST_CARD = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 1.0, "per_row_ms": 0.1})
# The article's spread of lengths, scaled down tenfold.
SHORT_LENGTHS = (4, 9, 15, 22, 30, 48, 65, 90)


# A fifth of the article's cost: steps long enough that the policies' gaps beat Python's own overhead.
STEADY_CARD = RX_9070_XT_QWEN35_9B.model_copy(update={"floor_ms": 3.4, "per_row_ms": 0.22})


def fast_service(card=FAST_CARD, **overrides) -> SwarmService:
    values = {"engine": "modeled", "host": "127.0.0.1", "port": 0, "num_lanes": 8, "policy": "naive"} | overrides
    # The factory honours the settings' KV type, as engine_factory does for the modeled card.
    return SwarmService(Settings(**values), engine_factory=lambda s: ModeledEngine(card.with_kv_type(s.kv_type),
                                                                                  realtime=True, max_lanes=64))


@pytest.fixture
def no_user_config(monkeypatch, tmp_path):
    monkeypatch.setenv("SWARM_PANEL_CONFIG_FILE", str(tmp_path / "absent.toml"))


@pytest.fixture
def card():
    return FAST_CARD


@pytest.fixture
def window(qtbot, no_user_config, tmp_path, card):
    """The real main window on a started fast service, settings in a throwaway file."""
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    theme.configure_pyqtgraph()
    service = fast_service(card)
    service.start()
    win = MainWindow(service, SettingsStore(tmp_path / "panel.ini"))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    service.stop()
