import hashlib
from pathlib import Path

import llama_cpp
import pytest
from huggingface_hub import constants

from swarm_panel.app.cli.main import main
from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.service.engine_factory import resolve_model
from swarm_panel.runtime.models.bundled import bundled_model_path
from swarm_panel.runtime.planning.shape import read_shape
from tests.app.models_hub.conftest import SMOL_FILE, SMOL_REPO, SPLIT_REPO


def test_the_file_lands_in_the_hub_cache_and_the_second_start_asks_nothing(hub):
    path = fetch(f"hf:{SMOL_REPO}:q4_1")
    assert path.name == SMOL_FILE
    assert Path(constants.HF_HUB_CACHE) in path.parents
    assert path.read_bytes() == bundled_model_path().read_bytes()
    assert read_shape(path).n_layer == read_shape(bundled_model_path()).n_layer
    hub.requests.clear()
    assert fetch(f"hf:{SMOL_REPO}:Q4_1") == path
    assert hub.requests == []


def test_the_second_start_works_with_the_hub_gone(hub):
    path = fetch(f"hf:{SMOL_REPO}:Q4_1")
    hub.stop()
    assert fetch(f"hf:{SMOL_REPO}:Q4_1") == path


def test_a_dropped_connection_resumes_where_it_stopped(hub):
    size = bundled_model_path().stat().st_size
    hub.drop_after = size // 2
    path = fetch(f"hf:{SMOL_REPO}:Q4_1")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(bundled_model_path().read_bytes()).hexdigest()
    resumed = [r for r in hub.ranges if r.startswith("bytes=") and not r.startswith("bytes=0-")]
    assert resumed, hub.ranges
    # It picks up at the last chunk written before the drop, not at zero.
    assert 0 < int(resumed[0][6:].split("-")[0]) <= size // 2
    assert hub.ranges.count("") == 1


def test_a_corrupted_byte_is_caught_and_the_file_removed(hub):
    hub.corrupt = True
    with pytest.raises(ValueError, match="sha256.*removed"):
        fetch(f"hf:{SMOL_REPO}:Q4_1")
    assert not list(Path(constants.HF_HUB_CACHE).rglob(SMOL_FILE))


def test_split_files_are_taken_whole(hub):
    first = fetch(f"hf:{SPLIT_REPO}:Q8_0")
    assert first.name == "Split-Q8_0-00001-of-00002.gguf"
    assert (first.parent / "Split-Q8_0-00002-of-00002.gguf").is_file()


@pytest.mark.parametrize(("name", "message"), [
    (f"hf:{SMOL_REPO}:Q5_K_M", f"no file for quant 'Q5_K_M'; it has: {SMOL_FILE}"),
    ("hf:mock-org/no-gguf", "holds no GGUF"),
    ("hf:mock-org/missing", "no such repository"),
    ("hf:mock-org/gated-GGUF", "gated.*HF_TOKEN"),
    ("hf:just-a-name", "not a hub model"),
])
def test_bad_names_get_clear_messages(hub, name, message):
    with pytest.raises(ValueError, match=message):
        fetch(name)


def test_no_network_says_so(hub):
    hub.stop()
    with pytest.raises(ValueError, match="cannot reach"):
        fetch(f"hf:{SMOL_REPO}:Q4_1")


def test_pull_prints_where_the_file_landed(hub, capsys):
    assert main(["pull", f"{SMOL_REPO}:Q4_1"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(fetch(f"hf:{SMOL_REPO}:Q4_1"))
    assert main(["pull", f"{SMOL_REPO}:Q9"]) == 2
    assert SMOL_FILE in capsys.readouterr().err


def test_a_hub_model_setting_resolves_to_the_cached_file_and_loads(hub):
    path, _ = resolve_model(f"hf:{SMOL_REPO}:Q4_1")
    model = llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False)
    try:
        assert model.detokenize(model.tokenize(b"hello", add_bos=False)) == b"hello"
    finally:
        model.close()


def test_a_disk_that_fills_mid_download_says_what_it_needs_and_keeps_the_partial_file(hub, monkeypatch):
    import errno

    from swarm_panel.app.models_hub import fetch as fetch_module

    real = fetch_module.http_get

    def fills_up(url, temp_file, **kwargs):
        temp_file.write(bundled_model_path().read_bytes()[:4096])
        temp_file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fetch_module, "http_get", fills_up)
    with pytest.raises(ValueError, match=r"the disk filled .* it needs 0\.\d+ GiB, .* GiB were free .* partial file is kept"):
        fetch(f"hf:{SMOL_REPO}:Q4_1")
    partial = list(Path(constants.HF_HUB_CACHE).rglob("*.partial"))
    assert len(partial) == 1 and partial[0].stat().st_size == 4096
    # The next start goes on from there, and the file comes out whole.
    monkeypatch.setattr(fetch_module, "http_get", real)
    hub.ranges.clear()
    path = fetch(f"hf:{SMOL_REPO}:Q4_1")
    assert hub.ranges[0] == "bytes=4096-"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(bundled_model_path().read_bytes()).hexdigest()
