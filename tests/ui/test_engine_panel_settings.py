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


def test_the_engine_box_shows_the_memory_plan_before_load(qtbot, tiny_qwen35_model_path):
    from swarm_panel.app.service.plan_report import settings_plan
    from swarm_panel.ui.panels.engine_panel import EnginePanel

    panel = EnginePanel()
    qtbot.addWidget(panel)
    settings = Settings(num_lanes=4, n_ctx=4096)
    panel.select("llama", str(tiny_qwen35_model_path))
    panel.plan_for(settings)
    expected = settings_plan(settings.model_copy(update={"model": tiny_qwen35_model_path, "kv_unified": None}),
                             device_bytes=None)
    assert f"Needs {expected.device_total / (1 << 30):.2f} GiB" in panel.plan.text()
    assert "recurrent" in panel.plan.text() and "4 lanes x 1,024 tokens" in panel.plan.text()
    assert "KV cache" in panel.plan.toolTip()
    panel.select("modeled", None)
    assert panel.plan.text() == ""
