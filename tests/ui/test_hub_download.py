"""The engine box's download from the hub (the loopback mock): a repository's models listed with their sizes, the
plan asked for the one picked, a bar with speed and time left, Cancel leaving a partial file that the next
download resumes, and the finished file, whole and checked, named for Load."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants

from swarm_panel.runtime.models.bundled import bundled_model_path
from tests.app.models_hub.conftest import SMOL_FILE, SMOL_REPO, hub  # noqa: F401 (the fixture)


def test_the_download_bar_moves_and_cancel_leaves_a_file_the_next_download_resumes(qtbot, hub):  # noqa: F811
    from swarm_panel.ui.panels.hub_download import HubDownload

    size = bundled_model_path().stat().st_size
    hub.chunk_delay = 0.02
    panel = HubDownload()
    qtbot.addWidget(panel)
    panel.repo.setText(SMOL_REPO)
    with qtbot.waitSignal(panel.chosen, timeout=20_000) as chosen:
        panel.look_up.click()
    assert chosen.args[0] == f"hf:{SMOL_REPO}:{SMOL_FILE.removesuffix('.gguf')}"
    assert panel.models.count() == 1 and f"{size / 1e9:.2f} GB" in panel.models.itemText(0)

    seen: list[tuple[int, int]] = []
    shown: list[str] = []
    failures: list[tuple[str, str]] = []
    panel.failed.connect(lambda name, why: failures.append((name, why)))

    def progressed(done: int, total: int, rate) -> None:
        seen.append((done, total))
        shown.append(panel.status.text())
        assert panel.downloading == chosen.args[0]  # what the close question names
        if len(seen) == 2:
            panel.cancel.click()

    panel._progressed.connect(progressed)
    with qtbot.waitSignal(panel._finished, timeout=60_000) as finished:
        panel.download.click()
    assert finished.args[0] is None and "cancelled" in finished.args[1]
    assert failures == [] and panel.downloading == ""  # a Cancel is no failure to notify
    assert 0 < seen[-1][0] < size and seen[-1][1] == size
    # The bar's words: how much of how much, the speed and the time left.
    assert any(f"of {size / 1e6:,.1f} MB" in text and "MB/s" in text and "s left" in text for text in shown), shown
    partial = list(Path(constants.HF_HUB_CACHE).rglob("*.partial"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < size
    kept = partial[0].stat().st_size

    hub.chunk_delay = 0.0
    hub.ranges.clear()
    with qtbot.waitSignal(panel.downloaded, timeout=60_000) as downloaded:
        panel.download.click()
    assert Path(downloaded.args[0]).read_bytes() == bundled_model_path().read_bytes()
    # Resumed where the cancelled one stopped, not from the first byte.
    assert hub.ranges[0] == f"bytes={kept}-", hub.ranges
    assert not list(Path(constants.HF_HUB_CACHE).rglob("*.partial"))
    assert panel.bar.value() == panel.bar.maximum() and "downloaded" in panel.status.text()


def test_each_model_of_the_repository_says_whether_it_fits_before_its_download(qtbot, hub):  # noqa: F811
    from swarm_panel.app.service.plan_report import machine_ram, settings_plan
    from swarm_panel.app.settings.schema import Settings
    from swarm_panel.ui.panels.engine_panel import EnginePanel

    panel = EnginePanel()
    qtbot.addWidget(panel)
    settings = Settings(num_lanes=4, n_ctx=8192)
    panel.plan_for(settings)
    panel.choice.setCurrentIndex(panel.choice.findData("gguf"))
    panel.hub.repo.setText(SMOL_REPO)
    with qtbot.waitSignal(panel.hub.chosen, timeout=20_000) as chosen:
        panel.hub.look_up.click()
    name = chosen.args[0]
    plan = settings_plan(settings.model_copy(update={"engine": "llama", "model": name}), device_bytes=machine_ram())
    listed = panel.hub.models.itemText(0)
    assert f"{plan.device_total / (1 << 30):.1f} GiB for 4 x" in listed and ("fits:" in listed) == plan.fits
    # The plan line above Load names the model picked, before anything was downloaded.
    assert panel.path.text() == name and "Needs" in panel.plan.text()
    assert not list(Path(constants.HF_HUB_CACHE).rglob("*.gguf"))


def test_a_repository_that_holds_no_gguf_says_so_in_the_box(qtbot, hub):  # noqa: F811
    from swarm_panel.ui.panels.hub_download import HubDownload

    panel = HubDownload()
    qtbot.addWidget(panel)
    panel.repo.setText("mock-org/no-gguf")
    with qtbot.waitSignal(panel._listed, timeout=20_000):
        panel.look_up.click()
    assert "holds no GGUF" in panel.status.text() and not panel.download.isEnabled()


def test_a_download_that_fails_says_which_model_and_why(qtbot, hub):  # noqa: F811
    from swarm_panel.ui.panels.hub_download import HubDownload

    panel = HubDownload()
    qtbot.addWidget(panel)
    panel.repo.setText(SMOL_REPO)
    with qtbot.waitSignal(panel.chosen, timeout=20_000):
        panel.look_up.click()
    panel.models.addItem("not-in-the-repository", "not-in-the-repository")
    panel.models.setCurrentIndex(panel.models.count() - 1)
    with qtbot.waitSignal(panel.failed, timeout=60_000) as failed:
        panel.download.click()
    assert failed.args[0] == f"hf:{SMOL_REPO}:not-in-the-repository" and failed.args[1]
    assert panel.downloading == "" and panel.status.text() == failed.args[1]
