import pytest

from swarm_panel.app.cli.main import main
from swarm_panel.app.models_hub.fetch import fetch
from swarm_panel.app.models_hub.remote_plan import remote_shape
from swarm_panel.runtime.models.bundled import bundled_model_path
from tests.app.models_hub.conftest import SMOL_FILE, SMOL_REPO, SPLIT_REPO


def test_the_remote_plan_equals_the_local_plan_and_reads_only_the_header(hub, capsys):
    name = f"hf:{SMOL_REPO}:Q4_1"
    main(["plan", "--model", name, "--vram", "16GiB"])
    assert f"{SMOL_REPO}/{SMOL_FILE}" in capsys.readouterr().out
    main(["plan", "--model", name, "--vram", "16GiB", "--json"])
    remote = capsys.readouterr().out
    asked = sum(int(r[6:].split("-")[1]) - int(r[6:].split("-")[0]) + 1 for r in hub.ranges)
    assert 0 < asked < bundled_model_path().stat().st_size // 10
    main(["plan", "--model", str(fetch(name)), "--vram", "16GiB", "--json"])
    assert capsys.readouterr().out == remote


def test_a_remote_header_that_is_no_gguf_is_named(hub):
    with pytest.raises(ValueError, match="not a GGUF"):
        remote_shape(f"hf:{SPLIT_REPO}:Q4_K_M")
