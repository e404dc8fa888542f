"""The agents box: who is connected, the agents table and the agent view, sharing height in a splitter."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.service.agents import AgentActivity
from swarm_panel.ui.panels.agent_view import AgentView
from swarm_panel.ui.panels.agents_table import HEADERS, AgentRow, AgentsTable
from swarm_panel.ui.toolkit import theme

# The table keeps room for this many rows before the agent view gets any (a swarm is 8 agents by default).
ROWS_SHOWN = 8


class AgentsPanel(QtWidgets.QWidget):
    """The table's columns can be hidden from its header's context menu; the splitter hands the view's room over."""

    def __init__(self, activity: AgentActivity, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.connected = QtWidgets.QLabel("0 agents connected")
        self.connected.setObjectName("big")
        self.table = AgentsTable()
        self.view = AgentView(activity)
        self.table.agent_clicked.connect(self.view.show_agent)
        header = self.table.horizontalHeader()
        header.setContextMenuPolicy(QtCore.Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._column_menu)
        header.setToolTip("right-click to hide or show columns")
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.view)
        # The view may be dragged shut to give the table every row; the table never collapses.
        self.splitter.setCollapsible(0, False)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        self.table.setMinimumHeight(self.table.rows_height(3))
        # Until the user drags the handle, each resize gives the table its rows again: a window manager may
        # hand the window its final size after the first layout.
        self.auto_split = True
        self.splitter.splitterMoved.connect(self._moved_by_hand)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.connected)
        layout.addWidget(self.splitter, 1)

    def _moved_by_hand(self) -> None:
        self.auto_split = False

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if self.auto_split:
            self.give_table_its_rows()

    def give_table_its_rows(self) -> None:
        """The table the height of ROWS_SHOWN rows where the splitter has it, the view the rest."""
        total = sum(self.splitter.sizes())
        wanted = self.table.rows_height(ROWS_SHOWN)
        if total > 0:
            self.splitter.blockSignals(True)  # not a move by hand
            self.splitter.setSizes([min(wanted, total - self.view.minimumSizeHint().height()),
                                    max(total - wanted, self.view.minimumSizeHint().height())])
            self.splitter.blockSignals(False)

    def set_agents(self, connected: int, rows: list[AgentRow]) -> None:
        self.connected.setText(f"{connected} agent{'s' if connected != 1 else ''} connected"
                               f" <span style='color:{theme.TEXT_DIM}; font-size:10pt'>({len(rows)} seen)</span>")
        self.table.agents.set_rows(rows)

    def hidden_columns(self) -> list[str]:
        return [name for k, name in enumerate(HEADERS) if self.table.isColumnHidden(k)]

    def set_hidden_columns(self, names: list[str]) -> None:
        for k, name in enumerate(HEADERS):
            self.table.setColumnHidden(k, k > 0 and name in names)  # the agent's name always shows

    def _column_menu(self, position: QtCore.QPoint) -> None:
        menu = QtWidgets.QMenu(self)
        for k, name in enumerate(HEADERS[1:], start=1):
            action = menu.addAction(name.replace("\n", " "))
            action.setCheckable(True)
            action.setChecked(not self.table.isColumnHidden(k))
            action.toggled.connect(lambda shown, column=k: self.table.setColumnHidden(column, not shown))
        menu.popup(self.table.horizontalHeader().mapToGlobal(position))
