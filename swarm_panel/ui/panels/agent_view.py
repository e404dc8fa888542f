"""A live look at one agent: its last question, the answer streaming in, tool calls, finish reason.

It reads the agent's latest request on the panel's timer (never per token) and repaints only what
changed, so it is cheap enough to leave open while the swarm runs.
"""

from __future__ import annotations

import time

from PySide6 import QtWidgets

from swarm_panel.app.service.agents import AgentActivity, AgentTurn, tool_calls_of
from swarm_panel.ui.toolkit import theme
from swarm_panel.ui.toolkit.elided_label import ElidedLabel

FINISH_TEXT = {"stop": "stopped on its own", "length": "cut off at max_tokens", "abort": "aborted (hung up)",
               "error": "failed", "tool_calls": "called a tool"}


class AgentView(QtWidgets.QGroupBox):
    def __init__(self, activity: AgentActivity, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Agent", parent)
        self.activity = activity
        self.agent: str | None = None
        self._shown: tuple | None = None
        self.title = QtWidgets.QLabel("Pick an agent in the table or a lane in the timeline.")
        self.title.setWordWrap(True)
        # One line, whole in its tooltip: a long question must not push the answer out of a short view.
        self.asked = ElidedLabel("")
        self.asked.setStyleSheet(f"color: {theme.TEXT_DIM}")
        self.answer = QtWidgets.QPlainTextEdit()
        self.answer.setReadOnly(True)
        self.answer.setMinimumHeight(40)
        self.answer.setPlaceholderText("the answer streams in here")
        self.calls = QtWidgets.QLabel("")
        self.calls.setWordWrap(True)
        self.calls.setStyleSheet(f"color: {theme.PREFILL}")
        self.status = QtWidgets.QLabel("")
        self.status.setStyleSheet(f"color: {theme.TEXT_DIM}")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addWidget(self.asked)
        layout.addWidget(self.answer, 1)
        layout.addWidget(self.calls)
        layout.addWidget(self.status)

    def show_agent(self, agent: str | None) -> None:
        self.agent = agent
        self._shown = None
        self.refresh()

    def refresh(self) -> None:
        if self.agent is None or not self.isVisible():
            return
        turn = self.activity.latest(self.agent)
        if turn is None:
            self._paint_nothing()
            return
        answer = turn.answer
        finish = turn.finish_reason
        key = (turn.request.request_id, len(answer), finish)
        if key != self._shown:
            self._paint(turn, answer, finish)
            self._shown = key
        self.status.setText(self._status(turn, finish))

    def _paint_nothing(self) -> None:
        self.title.setText(f"<b>{self.agent}</b>: no request seen yet")
        self.asked.setText("")
        self.answer.setPlainText("")
        self.calls.setText("")
        self.status.setText("")

    def _paint(self, turn: AgentTurn, answer: str, finish: str | None) -> None:
        # The server's id, counted over every agent (the table's req counts this agent's own).
        self.title.setText(f"<b>{turn.agent}</b> &nbsp; server request #{turn.request.request_id}")
        self.asked.setText(f"asked: {turn.asked.strip() or '(no text)'}")
        bar = self.answer.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        self.answer.setPlainText(answer)
        if at_end:
            bar.setValue(bar.maximum())
        calls = tool_calls_of(turn, answer) if finish is not None else []
        self.calls.setText("tool calls: " + "; ".join(f"{name}({args})" for name, args in calls) if calls else "")

    def _status(self, turn: AgentTurn, finish: str | None) -> str:
        r = turn.request
        tokens = f"{r.num_output_tokens} tokens"
        if finish is None:
            state = "waiting" if r.num_computed_tokens == 0 and not r.num_output_tokens else "streaming"
            return f"{state} · {tokens} · {time.monotonic() - turn.started:.1f} s"
        why = FINISH_TEXT.get(finish, finish)
        return f"finish_reason: {finish} ({why}) · {tokens}" + (f" · {r.error}" if r.error else "")
