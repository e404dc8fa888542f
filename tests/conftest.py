import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A random-weight llama GGUF of about 1 MB, written once per test session."""
    from runtime.demo_model import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("models") / "tiny.gguf", "tiny")
