"""The engine box lists the GGUFs already on disk (llama.cpp's cache and the models_dir setting here), each with
its facts; a new file shows after Rescan, no restart; picking one loads it."""

from __future__ import annotations

import re
import shutil

from huggingface_hub import constants
from PySide6 import QtCore

from swarm_panel.app.settings.schema import Settings


def test_the_engine_box_lists_the_models_on_disk_and_loads_the_one_picked(qtbot, tmp_path, monkeypatch,
                                                                            tiny_model_path, tiny_qwen35_model_path):
    from swarm_panel.ui.panels.engine_panel import EnginePanel

    cache, mine = tmp_path / "llama-cache", tmp_path / "mine"
    cache.mkdir()
    mine.mkdir()
    shutil.copy(tiny_model_path, cache / "tiny-llama.gguf")
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path))  # no LM Studio folder of the machine's
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    panel = EnginePanel()
    qtbot.addWidget(panel)
    panel.plan_for(Settings(models_dir=mine))
    listed = [panel.local.combo.itemText(i) for i in range(panel.local.combo.count())]
    assert len(listed) == 2 and "tiny-llama.gguf" in listed[1] and "llama.cpp cache" in listed[1]
    assert "llama F16" in listed[1] and "trained 2,048 tokens" in listed[1]
    # With the plan's verdict for the settings Load starts from.
    assert re.search(r" · (fits|does not fit): \d+\.\d GiB for \d+ x [\d,]+$", listed[1]), listed[1]

    shutil.copy(tiny_qwen35_model_path, mine / "tiny-hybrid.gguf")
    qtbot.mouseClick(panel.local.rescan, QtCore.Qt.MouseButton.LeftButton)
    paths = [panel.local.combo.itemData(i) for i in range(1, panel.local.combo.count())]
    assert paths == sorted([str(cache / "tiny-llama.gguf"), str(mine / "tiny-hybrid.gguf")])
    hybrid = next(m for m in panel.local.models if m.path.name == "tiny-hybrid.gguf")
    assert (hybrid.arch, hybrid.source) == ("qwen35", "models_dir")

    panel.choice.setCurrentIndex(panel.choice.findData("gguf"))
    with qtbot.waitSignal(panel.load_requested) as asked:
        panel.local.combo.activated.emit(paths.index(str(mine / "tiny-hybrid.gguf")) + 1)
    assert str(asked.args[0]["model"]) == str(mine / "tiny-hybrid.gguf") and asked.args[0]["engine"] == "llama"
    assert panel.path.text() == str(mine / "tiny-hybrid.gguf")
