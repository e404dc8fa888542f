"""Real coding agents from the panel: each harness installed or how to install it, a folder, a task and a
count to start, and the launched agents with their turns, polled once a second (app.harness.launcher
runs them on the app's asyncio loop). They are served as named agents, so the agents table lists them too.
Each works in its own worktree inside the fence; their changes are reviewed and landed in `worktrees`
(ui.panels.agent_worktrees), which the window shows as a dock of its own, Review, beside this one.
Without a fence nothing is launched: the Unconfined box is the opt-in that launches them anyway, and a refused
Start says why. With one, the Internet box lets them out to the internet through the fence's proxy
(app.fence.network).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.app.harness.config import DEFAULT_MAX_OUTPUT_TOKENS, HarnessOptions
from swarm_panel.app.harness.example import example_folder, prepare_example
from swarm_panel.app.harness.kinds import APIS, KINDS, HarnessKind
from swarm_panel.app.harness.launcher import DEFAULT_TASK, FINISHED, HarnessRun, Launcher
from swarm_panel.app.service.agents import AgentKeys, RequestLog
from swarm_panel.app.settings.schema import Settings
from swarm_panel.ui.panels.agent_worktrees import AgentWorktrees
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.table_rows import set_row

log = logging.getLogger(__name__)

POLL_MS = 1000  # turns change per request, not per token
HEADERS = ("agent", "harness", "status", "turns", "computed", "exit")
HEADER_TIPS = {"turns": "requests the server has logged for the agent", "computed": "prompt tokens computed on its "
               "last turn (the rest came from the prefix cache)", "exit": "its exit code once it has ended"}
MAX_AGENTS = 16
STATUS_COLOURS = {"running": theme.USEFUL, "exited": theme.MINT, "stopped": theme.TEXT_DIM, "failed": theme.QUEUE}


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        return None
    return loop if loop.is_running() else None


def _selectable(text: str) -> QtWidgets.QLabel:
    label = QtWidgets.QLabel(text)
    label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setStyleSheet("font-family: monospace")
    return label


class HarnessPanel(QtWidgets.QWidget):
    def __init__(self, requests: RequestLog | None, server_url: Callable[[], str | None],
                 settings: Callable[[], Settings] | None = None, kinds: dict[str, HarnessKind] | None = None,
                 launcher: Launcher | None = None, parent: QtWidgets.QWidget | None = None, *,
                 keys: AgentKeys | None = None) -> None:
        super().__init__(parent)
        self.kinds = dict(kinds if kinds is not None else KINDS)
        # keys: the service's, so each agent gets its own (app.service.agents), never the panel's.
        self.launcher = launcher or Launcher(requests, keys=keys)
        self._server_url = server_url
        self._settings = settings  # the service's: its context and API key, read at each start
        self._tasks: set[asyncio.Future] = set()  # kept so the loop does not drop them

        self.kind = QtWidgets.QComboBox()
        self.installed: dict[str, QtWidgets.QLabel] = {}
        self.where: dict[str, QtWidgets.QLabel] = {}
        # A prepared project the default task is about (written at the first Start there).
        self.folder = QtWidgets.QLineEdit(str(example_folder()))
        browse = QtWidgets.QPushButton("Choose…")
        browse.clicked.connect(self._choose_folder)
        self.task = QtWidgets.QLineEdit(DEFAULT_TASK)
        self.count = QtWidgets.QSpinBox()
        self.count.setRange(1, MAX_AGENTS)
        self.max_output = QtWidgets.QSpinBox()
        self.max_output.setRange(16, 1 << 17)
        self.max_output.setSingleStep(1024)
        self.max_output.setValue(DEFAULT_MAX_OUTPUT_TOKENS)
        self.max_output.setToolTip("each response's output limit, as each harness is told (Codex has no such "
                                   "setting: the server's default-max-tokens applies)")
        self.unconfined = QtWidgets.QCheckBox("Unconfined: launch them without a fence")
        self.unconfined.setToolTip("No fence (bubblewrap or Landlock) works here. Checked, each harness runs with "
                                   "your rights: it can read and change anything you can, outside its worktree too. "
                                   "Unchecked, nothing is launched.")
        self.unconfined.setStyleSheet(f"color: {theme.QUEUE}")
        self.unconfined.setVisible(not self.launcher.fence.available)
        self.network = QtWidgets.QCheckBox("Internet")
        self.network.setToolTip("Fenced, an agent reaches the endpoint and nothing else. Checked, it also reaches "
                                "the internet through a proxy that refuses this machine and its network; a program "
                                "that ignores HTTPS_PROXY has no network still.")
        self.network.setVisible(self.launcher.fence.available)
        self.worktrees = AgentWorktrees(self.launcher.workspaces, lambda: self.launcher.fence)
        self.start_button = QtWidgets.QPushButton("Start")
        self.start_button.setObjectName("primary")
        self.start_button.clicked.connect(self.start)
        self.message = QtWidgets.QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

        self.table = QtWidgets.QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        for column, header in enumerate(HEADERS):
            self.table.horizontalHeaderItem(column).setToolTip(HEADER_TIPS.get(header, ""))
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop_selected)
        self.stop_all_button = QtWidgets.QPushButton("Stop all")
        self.stop_all_button.clicked.connect(self.stop_all)

        self._build_layout(browse)
        self.check_installed()
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    def _build_layout(self, browse: QtWidgets.QPushButton) -> None:
        harnesses = QtWidgets.QGridLayout()
        harnesses.setHorizontalSpacing(10)
        for column, caption in enumerate(("harness", "first turn", "", "its path, or how to install it")):
            label = QtWidgets.QLabel(caption)
            label.setStyleSheet(f"color: {theme.TEXT_DIM}; font-size: 9pt")
            harnesses.addWidget(label, 0, column)
        for row, kind in enumerate(self.kinds.values(), start=1):
            name = QtWidgets.QLabel(kind.display)
            name.setStyleSheet("font-weight: bold")
            needs = QtWidgets.QLabel(f"~{kind.context_tokens / 1000:.0f}k tokens")
            needs.setStyleSheet(f"color: {theme.TEXT_DIM}")
            needs.setToolTip(f"speaks {APIS[kind.api]}; its first turn needs ~{kind.context_tokens:,} tokens of "
                             "context")
            self.installed[kind.key] = QtWidgets.QLabel()
            self.where[kind.key] = _selectable("")
            self.where[kind.key].setWordWrap(True)
            for column, widget in enumerate((name, needs, self.installed[kind.key], self.where[kind.key])):
                harnesses.addWidget(widget, row, column)
        harnesses.setColumnStretch(3, 1)
        folder_row = QtWidgets.QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(browse)
        counts = QtWidgets.QHBoxLayout()
        counts.addWidget(self.count)
        counts.addWidget(QtWidgets.QLabel("max output"))
        counts.addWidget(self.max_output)
        counts.addStretch(1)
        counts.addWidget(self.network)
        counts.addWidget(self.unconfined)
        counts.addWidget(self.start_button)
        form = QtWidgets.QFormLayout()
        form.addRow("harness", self.kind)
        form.addRow("folder", folder_row)
        form.addRow("task", self.task)
        form.addRow("agents", counts)
        launch_box = QtWidgets.QGroupBox("Launch coding agents")
        launch = QtWidgets.QVBoxLayout(launch_box)
        launch.addLayout(harnesses)
        launch.addLayout(form)
        launch.addWidget(self.message)

        buttons = QtWidgets.QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.stop_all_button)
        agents_box = QtWidgets.QGroupBox("Launched agents")
        agents = QtWidgets.QVBoxLayout(agents_box)
        agents.addWidget(self.table, 1)
        agents.addLayout(buttons)

        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(launch_box)
        layout.addWidget(agents_box, 1)

    # -- harnesses -----------------------------------------------------------------------------

    def check_installed(self) -> None:
        """Looks each harness up again (PATH, its variable); a quick lookup, it runs nothing."""
        chosen = self.kind.currentData()
        self.kind.clear()
        for kind in self.kinds.values():
            path = kind.path()
            installed, where = self.installed[kind.key], self.where[kind.key]
            installed.setText("installed" if path else "not installed")
            installed.setStyleSheet(f"color: {theme.MINT if path else theme.QUEUE}")
            where.setText(path or kind.install)
            where.setToolTip("" if path else f"install it with this command, or set {kind.env_var} to its path")
            self.kind.addItem(kind.display if path else f"{kind.display} (not installed)", kind.key)
        if chosen is not None:
            self.kind.setCurrentIndex(max(0, self.kind.findData(chosen)))

    def values(self) -> dict[str, object]:
        """What the next launch opens on: the harness, folder, task and count."""
        return {"kind": self.kind.currentData(), "folder": self.folder.text(), "task": self.task.text(),
                "count": self.count.value()}

    def set_values(self, values: dict[str, object]) -> None:
        if isinstance(values.get("kind"), str) and self.kind.findData(values["kind"]) >= 0:
            self.kind.setCurrentIndex(self.kind.findData(values["kind"]))
        for key, field in (("folder", self.folder), ("task", self.task)):
            if isinstance(values.get(key), str) and values[key].strip():
                field.setText(values[key])
        if isinstance(values.get("count"), int):
            self.count.setValue(values["count"])

    def select(self, name: str) -> None:
        """Selects the launched agent's row, if it is listed."""
        self.refresh()
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0) is not None and self.table.item(row, 0).text() == name:
                self.table.selectRow(row)
                return

    def _choose_folder(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Folder the agents work in", self.folder.text())
        if folder:
            self.folder.setText(folder)

    # -- starting and stopping -----------------------------------------------------------------

    def start(self) -> bool:
        """Starts the chosen harness; False with the reason shown when it cannot."""
        self.check_installed()
        kind = self.kinds[self.kind.currentData()]
        url = self._server_url()
        if not kind.found():
            self.message.setText(f"{kind.display} is not installed. Install it with: {kind.install}")
            return False
        if url is None:
            self.message.setText("The endpoint is off: the agents need it to talk to the model.")
            return False
        if _running_loop() is None:
            self.message.setText("Harnesses run on the app's event loop, which is not running.")
            return False
        self.launcher.options = self.options()
        self.launcher.unconfined = self.unconfined.isChecked()
        self.launcher.network = self.network.isChecked()
        if Path(self.folder.text()) == example_folder():
            prepare_example()
        n = self.count.value()
        self.message.setText(f"Starting {n} × {kind.display} in {self.folder.text()}…")
        self._run(self.launcher.start(kind, self.folder.text(), url, self.task.text(), n), self._started)
        return True

    def options(self) -> HarnessOptions:
        settings = self._settings() if self._settings is not None else None
        if settings is None:
            return HarnessOptions(max_output_tokens=self.max_output.value())
        key = settings.api_key.get_secret_value() if settings.api_key else None
        return HarnessOptions(max_output_tokens=self.max_output.value(), context_tokens=settings.n_ctx, api_key=key)

    def _started(self, runs: list[HarnessRun]) -> None:
        names = ", ".join(run.name for run in runs)
        self.message.setText(f"Started {names} ({runs[0].confinement if runs else '-'}), each in its own "
                             "worktree: they are served as agents of those names; Review shows their changes.")
        self.refresh()
        self.worktrees.poll()

    def stop_selected(self) -> None:
        for name in self.selected():
            self._run(self.launcher.stop(name), lambda _: self.refresh())

    def stop_all(self) -> None:
        self._run(self.launcher.stop_all(), lambda _: self.refresh())

    def selected(self) -> list[str]:
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        return [self.table.item(row, 0).text() for row in rows]

    def _run(self, work, done: Callable) -> None:
        if _running_loop() is None:
            work.close()
            self.message.setText("Harnesses run on the app's event loop, which is not running.")
            return
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(t, done))

    def _finished(self, task: asyncio.Future, done: Callable) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            done(task.result())
        elif isinstance(error, (ValueError, OSError)):
            self.message.setText(str(error))
        else:
            log.error("harness work failed", exc_info=error)
            self.message.setText(f"Failed: {error}")

    def shutdown(self) -> None:
        """The app is closing: every agent gets SIGTERM now."""
        self.timer.stop()
        self.worktrees.shutdown()
        self.launcher.terminate_all()

    # -- the table -----------------------------------------------------------------------------

    def refresh(self) -> None:
        runs = self.launcher.runs
        if self.table.rowCount() != len(runs):
            self.table.setRowCount(len(runs))
        for row, run in enumerate(runs):
            turns = self.launcher.turns(run.name)
            status = run.status + (" (stopping)" if run.stop_asked and run.status not in FINISHED else "")
            values = (run.name, run.kind.display, status, str(len(turns)),
                      f"{turns[-1].computed_tokens:,}" if turns else "–",
                      "–" if run.exit_code is None else str(run.exit_code))
            tip = run.error or run.answer() or " ".join(run.stderr.text.split())[-300:]
            set_row(self.table, row, values, tip)
            self.table.item(row, 2).setForeground(QtGui.QBrush(QtGui.QColor(STATUS_COLOURS.get(run.status, theme.TEXT))))
        self.stop_all_button.setEnabled(any(not run.finished for run in runs))

