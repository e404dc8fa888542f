"""The panel's words (issue 53): no text of a plot drawn over another, markers included, after policy
switches; every one-line label fits its widget at the default size; the engine box names both contexts
as /v1/models' meta and the README do."""

from __future__ import annotations

import itertools

import httpx
import pytest
from PySide6 import QtWidgets

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.ui.panels.engine_panel import FACT_LABELS
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.elided_label import ElidedLabel
from tests.ui.test_ui_common import SHORT_LENGTHS, card, no_user_config, window  # noqa: F401


@pytest.fixture
def styled():
    """The app's stylesheet: its fonts and paddings decide what fits."""
    app = QtWidgets.QApplication.instance()
    app.setStyleSheet(theme.STYLESHEET)
    yield
    app.setStyleSheet("")


@pytest.fixture
def swarming(styled, window, qtbot):  # noqa: F811
    swarm = LocalSwarm(window.service.engine_thread, agents=8, lengths=SHORT_LENGTHS, prompt_tokens=8)
    swarm.start()
    qtbot.waitUntil(lambda: len(window.agents.table.agents.rows) >= 8, timeout=10_000)
    yield window
    swarm.stop()


def test_no_text_of_a_plot_covers_another_after_policy_switches(swarming, qtbot):
    window = swarming
    # Two switches in quick succession: their markers stand side by side on every plot.
    window.controls.buttons["continuous"].click()
    qtbot.waitUntil(lambda: len(window.plots.marker_labels()) >= 1, timeout=5000)
    window.controls.buttons["naive"].click()
    qtbot.waitUntil(lambda: len(window.plots.marker_labels()) >= 2, timeout=5000)
    window.refresh()
    QtWidgets.QApplication.processEvents()
    for name, plot in window.plots.plots.items():
        items = window.plots.text_items(name)
        # The title, and on the highest plot the two markers' labels (the lines cross every plot).
        assert len(items) == (3 if name == "throughput" else 1), name
        view = plot.getViewBox().sceneBoundingRect()
        for item in items[1:]:
            assert view.contains(item.sceneBoundingRect()), (name, "a marker's label is cut by its plot's edge")
        for a, b in itertools.combinations(items, 2):
            assert not a.sceneBoundingRect().intersects(b.sceneBoundingRect()), (name, a, b)
        title = plot.titleLabel.item.sceneBoundingRect()
        assert title.width() <= plot.sceneBoundingRect().width(), (name, "its title is wider than the plot")


def test_every_one_line_label_fits_its_widget(swarming):
    window = swarming
    window.refresh()
    checked = set()
    for dock in window.docks.values():  # each tab raised in turn: a label in a hidden tab is laid out when shown
        dock.raise_()
        QtWidgets.QApplication.processEvents()
        labels = [label for label in window.findChildren(QtWidgets.QLabel)
                  if label.isVisible() and label.text() and not label.wordWrap() and not isinstance(label, ElidedLabel)]
        cut = [(label.text(), label.sizeHint().width(), label.width()) for label in labels
               if label.sizeHint().width() > label.width()]
        assert not cut, dock.windowTitle()
        checked.update(id(label) for label in labels)
    assert len(checked) > 40


def engine_contexts(window) -> tuple[str, str]:
    shown = window.engine_panel.shown_facts()
    return shown[FACT_LABELS["n_ctx"]], shown[FACT_LABELS["kv_capacity_tokens"]]


def test_the_engine_box_names_the_context_a_request_and_of_all_lanes(window):  # noqa: F811
    facts = window.service.meta()
    assert engine_contexts(window) == (f"{facts['n_ctx']:,}", f"{facts['kv_capacity_tokens']:,}")


@pytest.mark.slow
def test_the_engine_box_and_v1_models_agree_on_a_split_llama_engine(qtbot, no_user_config, tmp_path,  # noqa: F811
                                                                    tiny_model_path):
    from swarm_panel.app.service.engine_service import SwarmService
    from swarm_panel.app.settings.schema import Settings
    from swarm_panel.ui.shell.main_window import MainWindow

    service = SwarmService(Settings(engine="llama", model=tiny_model_path, n_ctx=2048, num_lanes=4, kv_unified=False,
                                    port=0, threads=1))
    service.start()
    window = MainWindow(service)
    qtbot.addWidget(window)
    try:
        with ThreadedHttpServer(service, port=0) as server:
            meta = httpx.get(f"{server.url}/v1/models").json()["data"][0]["meta"]
        per_request, all_lanes = engine_contexts(window)
        # Split KV: a request holds a lane's share; all lanes together hold --n-ctx, as the README says.
        assert (per_request, all_lanes) == (f"{meta['n_ctx']:,}", f"{meta['kv_capacity_tokens']:,}")
        assert meta["kv_capacity_tokens"] == 2048 and meta["n_ctx"] == 2048 // 4
    finally:
        window.close()
        service.stop()
