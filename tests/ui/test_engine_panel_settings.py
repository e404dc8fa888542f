"""The engine box offers what Settings accepts, and what it asks for is valid Settings."""

from __future__ import annotations

from swarm_panel.app.settings.fields import choices, field_spec
from swarm_panel.app.settings.schema import Settings


def test_the_engine_box_is_built_from_the_settings(qtbot):
    from swarm_panel.ui.panels.engine_panel import CHOICES, EnginePanel, engine_changes

    panel = EnginePanel()
    qtbot.addWidget(panel)
    offered = [panel.extra_buffers.itemData(i) for i in range(panel.extra_buffers.count())]
    assert tuple(offered) == choices("extra_buffers")
    assert panel.threads.maximum() == field_spec("threads").le and panel.threads.minimum() == 0
    engines = {engine_changes(key, "/m.gguf")["engine"] for key, _ in CHOICES if key != "fleet"}
    assert engines == set(choices("engine"))
    for key, _ in CHOICES:
        if key != "fleet":
            Settings(**engine_changes(key, "/m.gguf", extra_buffers=offered[-1], threads=panel.threads.maximum()))


def test_the_layout_choice_offers_every_kv_unified_value_and_round_trips(qtbot):
    from swarm_panel.ui.panels.engine_panel import EnginePanel, engine_changes

    panel = EnginePanel()
    qtbot.addWidget(panel)
    offered = [panel.layout_choice.itemData(i) for i in range(panel.layout_choice.count())]
    assert offered == [None, True, False]
    for value in offered:
        panel.select("llama", None, value)
        assert panel.kv_unified is value
        assert Settings(**engine_changes("bundled", "", panel.kv_unified)).kv_unified is value
