import shutil

from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.models_hub.local import find
from swarm_panel.runtime.models.bundled import bundled_model_path
from tests.app.models_hub.conftest import SMOL_FILE, SMOL_REPO


def test_models_in_the_hub_cache_and_models_dir_are_found_with_their_facts(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama"))
    mine = tmp_path / "mine"
    mine.mkdir()
    assert find(mine) == []
    cached = fetch(f"hf:{SMOL_REPO}:Q4_1")
    shutil.copy(bundled_model_path(), mine / "copy.gguf")
    (mine / "notes.gguf").write_bytes(b"not a model")
    found = {m.path: m for m in find(mine)}
    assert set(found) == {cached, mine / "copy.gguf"}
    model = found[cached]
    assert (model.source, model.arch, model.quant, model.size) == (
        "hub cache", "llama", "Q4_1", bundled_model_path().stat().st_size)
    assert model.n_ctx_train > 0
    assert found[mine / "copy.gguf"].source == "models_dir"
    assert cached.name == SMOL_FILE
