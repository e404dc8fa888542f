"""Each launched agent's worktree, for review: its changed files and +/- lines against its base (polled
every two seconds, off the GUI thread), its diff, and Apply or Discard. It reads the workspaces from disk
(app.workspace), so agents of an earlier session, or of `swarm-panel agents run`, are listed too.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.app.fence.walls import Fence
from swarm_panel.app.workspace.changes import Changes, changes, diff_text
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.app.workspace.land import apply, discard
from swarm_panel.app.workspace.records import Workspace, all_workspaces
from swarm_panel.ui.panels import worktree_rows as rows_of
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.table_rows import set_row

log = logging.getLogger(__name__)

POLL_MS = 2000  # a diff per agent per poll: git work, not a per-token view


def _survey(root: Path | None) -> list[tuple[Workspace, str, Changes | None]]:
    """Every kept workspace with its state and changes (None where they cannot be read); a worker's job.
    Its tree is read as data (app.workspace.reader): nothing the agent wrote runs."""
    rows = []
    for ws in all_workspaces(root):
        state = ws.state()  # before its changes: an agent ending meanwhile is still said to run, never kept
        try:
            found = changes(ws)
        except WorkspaceError as exc:
            log.debug("agent %s: changes unread (%s)", ws.name, exc)
            found = None
        rows.append((ws, state, found))
    return rows


class AgentWorktrees(QtWidgets.QGroupBox):
    """The worktrees table, the selected agent's diff, and Apply / Discard / Discard all."""

    # How many workspaces are kept, after each survey: the Review dock's title says it.
    counted = QtCore.Signal(int)

    def __init__(self, root: Path | None = None, fence: Callable[[], Fence] | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Agents' worktrees: review, then apply or discard", parent)
        self.root = root  # None: app.workspace's data folder
        self._fence = fence
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="worktrees")
        self._pending: list[tuple[concurrent.futures.Future, Callable]] = []
        self._surveying = False
        self.workspaces: list[Workspace] = []
        self._shown_diff: str | None = None
        # Workspaces made before this moment are an earlier session's: marked, and counted in `earlier`.
        self.session_started = time.time()
        self._wanted: str | None = None  # an agent to select once a survey lists it

        self.earlier = QtWidgets.QLabel("")
        self.earlier.setWordWrap(True)
        self.earlier.setStyleSheet(f"color: {theme.USEFUL}")
        self.earlier.hide()

        self.fence_label = QtWidgets.QLabel("")
        self.fence_label.setWordWrap(True)
        self.table = QtWidgets.QTableWidget(0, len(rows_of.HEADERS))
        self.table.setHorizontalHeaderLabels(rows_of.HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.horizontalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        for column, header in enumerate(rows_of.HEADERS):
            self.table.horizontalHeaderItem(column).setToolTip(rows_of.HEADER_TIPS.get(header, ""))
        self.table.itemSelectionChanged.connect(self.show_diff)
        self.diff = QtWidgets.QPlainTextEdit()
        self.diff.setReadOnly(True)
        self.diff.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.diff.setStyleSheet("font-family: monospace")
        self.diff.setPlaceholderText("Select an agent to see its diff against the commit it started from.")
        self._highlighter = rows_of.DiffHighlighter(self.diff.document())
        self.apply_button = QtWidgets.QPushButton("Apply")
        self.apply_button.setObjectName("primary")
        self.apply_button.setToolTip("merge its snapshot, the diff shown, into your current branch (a fast-forward "
                                     "or a merge commit); refused, with the reason, if it conflicts, if its tree "
                                     "changed after the snapshot, or if a link points out of its tree: nothing is "
                                     "half-applied")
        self.apply_button.clicked.connect(self.apply_selected)
        self.discard_button = QtWidgets.QPushButton("Discard")
        self.discard_button.setToolTip("remove its worktree and its branch: its changes are lost")
        self.discard_button.clicked.connect(self.discard_selected)
        self.discard_all_button = QtWidgets.QPushButton("Discard all")
        self.discard_all_button.setToolTip("every agent's worktree and branch that is not running")
        self.discard_all_button.clicked.connect(self.discard_all)
        self.message = QtWidgets.QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

        buttons = QtWidgets.QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.apply_button, self.discard_button, self.discard_all_button):
            buttons.addWidget(button)
        split = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.diff)
        split.setSizes([140, 260])
        split.setStretchFactor(1, 2)  # the diff is what is read
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.fence_label)
        layout.addWidget(self.earlier)
        layout.addWidget(split, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.message)  # its own line: a refusal names files, the dock may be narrow

        self.show_fence()
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self.collector = QtCore.QTimer(self)
        self.collector.setInterval(50)
        self.collector.timeout.connect(self.collect)
        self.collector.start()
        self.timer.start()
        self.poll()

    # -- the fence -------------------------------------------------------------------------------

    def show_fence(self) -> None:
        if self._fence is None:
            return
        fence = self._fence()
        colour = theme.MINT if fence.available else theme.QUEUE
        self.fence_label.setText(f"Fence: {fence.describe()}")
        self.fence_label.setStyleSheet(f"color: {colour}")

    # -- work off the GUI thread -----------------------------------------------------------------

    def _submit(self, work: Callable, done: Callable) -> None:
        self._pending.append((self._pool.submit(work), done))

    def collect(self) -> None:
        """Hands each finished job's result to its callback, on the GUI thread."""
        finished = [(f, done) for f, done in self._pending if f.done()]
        self._pending = [(f, done) for f, done in self._pending if not f.done()]
        for future, done in finished:
            error = future.exception()
            if error is None:
                done(future.result())
            elif isinstance(error, (WorkspaceError, OSError)):
                self.message.setText(str(error))
                self.message.setStyleSheet(f"color: {theme.QUEUE}")
            else:
                log.error("worktree work failed", exc_info=error)
                self.message.setText(f"Failed: {error}")

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Blocks until queued jobs are done and delivered (for a test or a screenshot)."""
        concurrent.futures.wait([f for f, _ in self._pending], timeout=timeout_s)
        self.collect()

    def poll(self) -> None:
        if not self._surveying:
            self._surveying = True
            root = self.root
            self._submit(lambda: _survey(root), self._show)

    def shutdown(self) -> None:
        self.timer.stop()
        self.collector.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the table -------------------------------------------------------------------------------

    def _show(self, rows: list[tuple[Workspace, str, Changes | None]]) -> None:
        self._surveying = False
        chosen = self.selected()
        self.workspaces = [ws for ws, _, _ in rows]
        self.table.blockSignals(True)
        self.table.setRowCount(len(rows))
        for row, (ws, state, found) in enumerate(rows):
            before = ws.created < self.session_started
            set_row(self.table, row, rows_of.cells(ws, state, found),
                    ("From an earlier session. " if before else "") + rows_of.tooltip(ws, found))
            font = self.table.item(row, 0).font()
            font.setItalic(before)
            self.table.item(row, 0).setFont(font)
            shown = rows_of.state_of(state, found)
            if shown in rows_of.STATE_COLOURS:
                self.table.item(row, 1).setForeground(QtGui.QBrush(QtGui.QColor(rows_of.STATE_COLOURS[shown])))
            else:
                self.table.item(row, 1).setData(QtCore.Qt.ItemDataRole.ForegroundRole, None)
            self.table.item(row, 3).setForeground(QtGui.QBrush(QtGui.QColor(theme.MINT)))
            self.table.item(row, 4).setForeground(QtGui.QBrush(QtGui.QColor(theme.QUEUE)))
            self.table.item(row, rows_of.FLAGGED).setForeground(QtGui.QBrush(QtGui.QColor(theme.QUEUE)))
            if ws.name == chosen:
                self.table.selectRow(row)
        self.table.blockSignals(False)
        self._show_earlier(sum(ws.created < self.session_started for ws in self.workspaces))
        if self._wanted is not None and self._workspace(self._wanted) is not None:
            chosen, self._wanted = self._wanted, None
            self.select(chosen)
        self.discard_all_button.setEnabled(bool(rows))
        if chosen is not None:
            self.show_diff()
        self.counted.emit(len(rows))

    def _show_earlier(self, kept: int) -> None:
        self.earlier.setVisible(kept > 0)
        if kept:
            self.earlier.setText(f"{kept} worktree{'s are' if kept != 1 else ' is'} kept from before this session "
                                 "(in italics): review, then apply or discard.")

    def select(self, name: str) -> None:
        """Selects the agent's row and shows its diff; one not listed yet is selected once a survey lists it."""
        for row, ws in enumerate(self.workspaces):
            if ws.name == name:
                self.table.selectRow(row)
                return
        self._wanted = name
        self.poll()

    def selected(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return self.table.item(rows[0].row(), 0).text() if rows and self.table.item(rows[0].row(), 0) else None

    def _workspace(self, name: str | None) -> Workspace | None:
        return next((ws for ws in self.workspaces if ws.name == name), None)

    def show_diff(self) -> None:
        ws = self._workspace(self.selected())
        if ws is None:
            self.diff.clear()
            return
        self._submit(lambda: (ws.name, diff_text(ws)), self._diff_shown)

    def _diff_shown(self, result: tuple[str, str]) -> None:
        name, text = result
        if name != self.selected() or text == self._shown_diff:
            return  # another agent was chosen meanwhile, or nothing changed: the scroll stays put
        self._shown_diff = text
        self.diff.setPlainText(text or f"{name} has changed nothing yet.")

    # -- landing ---------------------------------------------------------------------------------

    def apply_selected(self) -> None:
        ws = self._workspace(self.selected())
        if ws is None:
            self._say("Select an agent to apply.")
            return

        def done(landed) -> None:
            self._say(f"Applied {ws.name} to {ws.applied_to} ({landed.how}, {landed.commit[:12]}): "
                      f"{len(landed.files)} file(s).", theme.MINT)
            self.poll()

        self._submit(lambda: apply(ws), done)

    def discard_selected(self) -> None:
        ws = self._workspace(self.selected())
        if ws is None:
            self._say("Select an agent to discard.")
            return
        self._submit(lambda: discard(ws), lambda _: (self._say(f"Discarded {ws.name}: its worktree and branch "
                                                                "are gone."), self.poll()))

    def discard_all(self) -> None:
        targets = [ws for ws in self.workspaces if not ws.running()]

        def work() -> list[str]:
            refused = []
            for ws in targets:
                try:
                    discard(ws)
                except WorkspaceError as exc:
                    refused.append(str(exc))
            return refused

        def done(refused: list[str]) -> None:
            self._say("; ".join(refused) if refused else f"Discarded {len(targets)} worktree(s).",
                      theme.QUEUE if refused else None)
            self.poll()

        self._submit(work, done)

    def _say(self, text: str, colour: str | None = None) -> None:
        self.message.setText(text)
        self.message.setStyleSheet(f"color: {colour}" if colour else "")
