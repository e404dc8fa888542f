import pytest
from huggingface_hub import constants

from swarm_panel.runtime.models.bundled import bundled_model_path
from tests.app.models_hub.hub_mock import Hub

SMOL_REPO = "mock-org/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"
SPLIT_REPO = "mock-org/Split-GGUF"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The mock hub serving the bundled SmolLM2, a split GGUF and a file that is no GGUF, with a fresh hub cache."""
    smol = bundled_model_path().read_bytes()
    mock = Hub(repos={
        SMOL_REPO: {SMOL_FILE: smol, "README.md": b"# SmolLM2\n"},
        SPLIT_REPO: {"Split-Q8_0-00001-of-00002.gguf": smol[:1000], "Split-Q8_0-00002-of-00002.gguf": smol[1000:2000],
                     "Split-Q4_K_M.gguf": b"NOT A GGUF" * 100_000},
        "mock-org/no-gguf": {"model.safetensors": b"\0" * 64},
        "mock-org/gated-GGUF": {"gated-Q4_K_M.gguf": smol[:100]},
    }, gated={"mock-org/gated-GGUF"})
    url = mock.start()
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True, raising=False)
    yield mock
    mock.stop()
