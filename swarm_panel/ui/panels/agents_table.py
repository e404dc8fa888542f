"""Per-agent rows: state, priority (editable), requests, tokens, tok/s, TTFT and inter-token latency p50/p95."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from PySide6 import QtCore, QtGui, QtWidgets

from swarm_panel.runtime.serving.metrics import AgentFigures
from swarm_panel.ui.toolkit import theme

HEADERS = ("agent", "state", "prio", "req", "tokens", "tok/s", "TTFT ms\np50 / p95", "ITL ms\np50 / p95")
HEADER_TIPS = {"req": "requests this agent sent", "tokens": "tokens generated for this agent",
               "tok/s": "this agent's generated tokens a second, over the recent steps the KPIs use",
               HEADERS[6]: "time to first token, median / 95th percentile",
               HEADERS[7]: "inter-token latency, median / 95th percentile"}
PRIORITY_COLUMN = 2
PRIORITY_TIP = "priority under the priority policy: lower is served first (0 unless set); double-click to edit"
STATE_COLOURS = {"decode": theme.USEFUL, "prefill": theme.PREFILL, "padding": theme.PADDING, "waiting": theme.QUEUE,
                 "idle": theme.TEXT_DIM}


@dataclass(slots=True)
class AgentRow:
    agent: str
    state: str
    open: int
    figures: AgentFigures
    priority: int = 0
    # Prompt tokens in KV of total, while the agent's request is still computing its prompt.
    prompt: str = ""


def _ms(p50: float | None, p95: float | None) -> str:
    if p50 is None:
        return "–"
    return f"{p50 * 1e3:.0f} / {p95 * 1e3:.0f}" if p95 is not None else f"{p50 * 1e3:.0f}"


def agent_rows(figures: list[AgentFigures], inflight: dict[str, int], lane_states: dict[str, str],
               priorities: Mapping[str, int] | None = None, prompts: Mapping[str, str] | None = None) -> list[AgentRow]:
    """lane_states: agent -> what its lane does now ("decode", "prefill", "padding"); prompts: agent ->
    its prompt's progress ("14,336 / 20,928") while it computes."""
    priorities = priorities or {}
    prompts = prompts or {}
    by_name = {f.agent: f for f in figures}
    for name in priorities:
        by_name.setdefault(name, AgentFigures(agent=name))
    for name in inflight:
        by_name.setdefault(name, AgentFigures(agent=name))
    for name in lane_states:
        by_name.setdefault(name, AgentFigures(agent=name))
    rows = []
    for name in sorted(by_name):
        state = lane_states.get(name) or ("waiting" if inflight.get(name) else "idle")
        prompt = prompts.get(name, "") if state in ("prefill", "waiting") else ""
        rows.append(AgentRow(name, state, inflight.get(name, 0), by_name[name], priorities.get(name, 0), prompt))
    return rows


def with_priority(priorities: Mapping[str, int], agent: str, priority: int) -> dict[str, int]:
    """The agent priorities with one changed; 0 is everyone's default, so it is dropped."""
    changed = {**priorities, agent: priority}
    return {name: value for name, value in changed.items() if value != 0}


class AgentsModel(QtCore.QAbstractTableModel):
    priority_set = QtCore.Signal(str, int)

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[AgentRow] = []

    def set_rows(self, rows: list[AgentRow]) -> None:
        if [r.agent for r in rows] != [r.agent for r in self.rows]:
            self.beginResetModel()
            self.rows = rows
            self.endResetModel()
            return
        self.rows = rows
        if rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(HEADERS) - 1))

    def flags(self, index):
        flags = super().flags(index)
        if index.isValid() and index.column() == PRIORITY_COLUMN:
            flags |= QtCore.Qt.ItemFlag.ItemIsEditable
        return flags

    def setData(self, index, value, role=QtCore.Qt.ItemDataRole.EditRole) -> bool:  # noqa: N802
        """An edited priority goes to the scheduler (priority_set); the row shows it once the config says so."""
        if role != QtCore.Qt.ItemDataRole.EditRole or index.column() != PRIORITY_COLUMN:
            return False
        try:
            priority = int(value)
        except (TypeError, ValueError):
            return False
        self.priority_set.emit(self.rows[index.row()].agent, priority)
        return True

    def rowCount(self, parent=QtCore.QModelIndex()) -> int:  # noqa: N802 (Qt API)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QtCore.QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(HEADERS)

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != QtCore.Qt.Orientation.Horizontal:
            return None
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(HEADERS[section], PRIORITY_TIP if section == PRIORITY_COLUMN else None)
        return None

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        column = index.column()
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            f = row.figures
            state = f"{row.state} ({row.open})" if row.open > 1 else row.state
            state = f"{state}, prompt {row.prompt}" if row.prompt else state
            return (row.agent, state, str(row.priority), str(f.requests), f"{f.tokens:,}", f"{f.tok_s:.1f}",
                    _ms(f.ttft_p50, f.ttft_p95), _ms(f.itl_p50, f.itl_p95))[column]
        if role == QtCore.Qt.ItemDataRole.EditRole and column == PRIORITY_COLUMN:
            return row.priority
        if role == QtCore.Qt.ItemDataRole.ToolTipRole and column == PRIORITY_COLUMN:
            return PRIORITY_TIP
        if role == QtCore.Qt.ItemDataRole.ToolTipRole and column == 1 and row.prompt:
            return f"its prompt's tokens in the KV cache, of the prompt's {row.prompt.rpartition(' / ')[2]} tokens"
        if role == QtCore.Qt.ItemDataRole.ForegroundRole and column == 1:
            return QtGui.QBrush(QtGui.QColor(STATE_COLOURS.get(row.state, theme.TEXT)))
        if role == QtCore.Qt.ItemDataRole.TextAlignmentRole and column >= PRIORITY_COLUMN:
            return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        return None


class AgentsTable(QtWidgets.QTableView):
    agent_clicked = QtCore.Signal(str)
    priority_set = QtCore.Signal(str, int)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.agents = AgentsModel(self)
        self.setModel(self.agents)
        self.agents.priority_set.connect(self.priority_set)
        self.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.DoubleClicked
                             | QtWidgets.QAbstractItemView.EditTrigger.EditKeyPressed)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(20)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.setStyleSheet("font-size: 8pt")
        self.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.setToolTip("click an agent to watch its current request")
        self.clicked.connect(self._clicked)

    def rows_height(self, rows: int) -> int:
        """The view's height for the header and `rows` rows, scroll bar and frame included."""
        header = self.horizontalHeader().sizeHint().height()
        bar = self.horizontalScrollBar().sizeHint().height()
        return header + rows * self.verticalHeader().defaultSectionSize() + bar + 2 * self.frameWidth()

    def _clicked(self, index: QtCore.QModelIndex) -> None:
        if 0 <= index.row() < len(self.agents.rows):
            self.agent_clicked.emit(self.agents.rows[index.row()].agent)
