"""The panel on the screens users have (tests/conftest.py's offscreen screens, logical pixels): it opens
within the screen, every policy label fits, plots keep a minimum height, the engine box never draws over
itself, the agents table has its rows, and a rearranged layout comes back on the next launch."""

from __future__ import annotations

import itertools

import pytest
from PySide6 import QtCore, QtWidgets

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.ui.panels.agents_panel import ROWS_SHOWN
from swarm_panel.ui.plots.live_plots import MIN_PLOT_HEIGHT
from swarm_panel.ui.toolkit.screen_fit import roomy
from tests.ui.test_ui_common import SHORT_LENGTHS, fast_service, no_user_config  # noqa: F401

SIZES = ("1280x720", "1366x768", "1920x1080", "2560x1440", "1920x1080@1.5")


def screen_named(name: str):
    screens = {screen.name(): screen for screen in QtWidgets.QApplication.screens()}
    assert name in screens, f"tests/conftest.py's offscreen screens are missing: {sorted(screens)}"
    return screens[name]


def open_window(qtbot, store_path, screen_name: str):
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.settings_store import SettingsStore

    QtWidgets.QApplication.instance().setStyleSheet(theme.STYLESHEET)  # the app's fonts and paddings
    theme.configure_pyqtgraph()
    service = fast_service()
    service.start()
    window = MainWindow(service, SettingsStore(store_path))
    qtbot.addWidget(window)
    window.place_on(screen_named(screen_name))
    window.show()
    qtbot.waitUntil(lambda: window.layout_settled, timeout=5000)
    return window, service


@pytest.fixture
def running(qtbot, no_user_config, tmp_path, request):  # noqa: F811
    """The window on the screen named by the test's parameter, the modeled engine running its swarm."""
    window, service = open_window(qtbot, tmp_path / "panel.ini", request.param)
    swarm = LocalSwarm(service.engine_thread, agents=8, lengths=SHORT_LENGTHS, prompt_tokens=8)
    swarm.start()
    qtbot.waitUntil(lambda: len(window.agents.table.agents.rows) >= 8 and bool(window.engine_panel.shown_facts()),
                    timeout=10_000)
    window.refresh()
    QtWidgets.QApplication.processEvents()
    yield window, screen_named(request.param)
    swarm.stop()
    window.close()
    service.stop()
    QtWidgets.QApplication.instance().setStyleSheet("")


def visible_children(box: QtWidgets.QWidget) -> list[QtWidgets.QWidget]:
    direct = QtCore.Qt.FindChildOption.FindDirectChildrenOnly
    return [child for child in box.findChildren(QtWidgets.QWidget, options=direct)
            if child.isVisible() and not child.isWindow() and child.width() > 0 and child.height() > 0]


@pytest.mark.parametrize("running", SIZES, indirect=True)
def test_the_window_opens_within_the_screen_and_stays_readable(running):
    window, screen = running
    available = screen.availableGeometry()
    assert available.contains(window.frameGeometry()), (window.frameGeometry(), available)
    hint = window.minimumSizeHint()
    assert hint.width() <= available.width() and hint.height() <= available.height()

    for name, button in window.controls.buttons.items():
        assert button.isVisible()
        text = button.fontMetrics().horizontalAdvance(button.text())
        assert text <= button.contentsRect().width(), (name, button.text())
        assert button.width() >= button.sizeHint().width(), (name, "its padding is cut")
        assert window.header.geometry().contains(button.mapTo(window, QtCore.QPoint(button.width() - 1, 0)))

    shown = [widget for widget in window.plots.widgets.values() if widget.isVisible()]
    assert len(shown) == 4
    for widget in shown:
        assert widget.height() >= MIN_PLOT_HEIGHT
    assert window.timeline.isVisible()
    # On a small screen the service plot starts hidden (the View menu shows it), its height the others'.
    assert window.service_plot.isVisible() == roomy(available)
    for widget in (window.service_plot.plot, window.timeline.graphics):
        assert not widget.isVisible() or widget.height() >= widget.minimumHeight() > 0

    children = visible_children(window.engine_panel)
    assert len(children) > 10  # the choice, the buttons and the facts grid
    for a, b in itertools.combinations(children, 2):
        assert not a.geometry().intersects(b.geometry()), (a, b, a.geometry(), b.geometry())

    table, splitter = window.agents.table, window.agents.splitter
    rows = table.viewport().height() // table.verticalHeader().defaultSectionSize()
    assert rows >= ROWS_SHOWN or table.rows_height(ROWS_SHOWN) <= sum(splitter.sizes())


def test_a_hidden_plot_gives_its_room_to_the_others(qtbot, no_user_config, tmp_path):  # noqa: F811
    window, service = open_window(qtbot, tmp_path / "panel.ini", "1280x720")
    try:
        before = window.plots.widgets["throughput"].height()
        window.plot_actions["kv"].setChecked(False)
        qtbot.waitUntil(lambda: window.plots.widgets["throughput"].height() > before, timeout=2000)
        assert window.plots.plots["utilization"].getAxis("bottom").isVisible()
        window.plot_actions["utilization"].setChecked(False)
        # The time axis moves to the lowest plot still shown.
        assert window.plots.plots["occupancy"].getAxis("bottom").isVisible()
    finally:
        window.close()
        service.stop()


def test_a_rearranged_layout_comes_back_on_its_screen(qtbot, no_user_config, tmp_path):  # noqa: F811
    store = tmp_path / "panel.ini"
    left = QtCore.Qt.DockWidgetArea.LeftDockWidgetArea
    right = QtCore.Qt.DockWidgetArea.RightDockWidgetArea
    window, service = open_window(qtbot, store, "1366x768")
    assert window.dockWidgetArea(window.docks["cache"]) == right
    window.addDockWidget(left, window.docks["cache"])
    window.docks["endpoint"].close()
    window.plot_actions["kv"].setChecked(False)
    window.agents.set_hidden_columns(["tokens"])
    window.resize(1240, 700)
    window.close()
    service.stop()

    window, service = open_window(qtbot, store, "1366x768")
    try:
        assert window.dockWidgetArea(window.docks["cache"]) == left
        assert not window.docks["endpoint"].toggleViewAction().isChecked()
        assert window.plots.shown_plots() == ["throughput", "occupancy", "utilization"]
        assert window.agents.hidden_columns() == ["tokens"]
        assert window.size() == QtCore.QSize(1240, 700)
        # The View menu's reset: the first launch's arrangement for this screen.
        window.reset_layout()
        assert window.dockWidgetArea(window.docks["cache"]) == right
        assert window.docks["endpoint"].toggleViewAction().isChecked()  # open again, a tab of the agents' group
        assert window.agents.hidden_columns() == []
    finally:
        window.close()
        service.stop()

    # Another screen has a layout of its own: there the first launch's.
    window, service = open_window(qtbot, store, "2560x1440")
    try:
        assert window.dockWidgetArea(window.docks["cache"]) == right
        assert window.docks["endpoint"].toggleViewAction().isChecked()
    finally:
        window.close()
        service.stop()


def test_on_a_laptop_screen_the_review_is_a_dock_of_its_own_and_counts_the_kept_worktrees(
        qtbot, no_user_config, tmp_path):  # noqa: F811
    """Beside the Coding agents tab, not below its launch form: at 1366x768 raising it shows the table's rows,
    the diff and Apply, none squeezed below its minimum."""
    from swarm_panel.app.workspace.create import create
    from tests.app.workspace.git_repo import make_repo

    repo = make_repo(tmp_path / "repo", {"story.txt": "one\n"})
    for name in ("codex-1", "codex-2"):
        create(repo, name)
    window, service = open_window(qtbot, tmp_path / "panel.ini", "1366x768")
    try:
        review = window.docks["review"]
        assert review in window.tabifiedDockWidgets(window.docks["coding"])
        qtbot.waitUntil(lambda: review.windowTitle() == "Review (2)", timeout=10_000)
        review.raise_()
        worktrees = window.harness.worktrees
        qtbot.waitUntil(lambda: worktrees.isVisible() and worktrees.table.rowCount() == 2, timeout=5000)
        assert review.widget() is worktrees  # no scroll area around it: its table and diff scroll themselves
        assert worktrees.height() >= worktrees.minimumSizeHint().height()
        table = worktrees.table
        assert table.viewport().height() >= 2 * table.rowHeight(0)
        assert worktrees.apply_button.isVisible() and worktrees.diff.height() >= 3 * worktrees.fontMetrics().height()
    finally:
        window.close()
        service.stop()
