"""The built-in swarm launcher: N agents, a length preset, a spread knob.

With the endpoint up it runs app.loadgen.swarm's agents over HTTP on the asyncio loop, exactly like external
agents; without one (tests, no server) it falls back to an in-process closed loop on the engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.loadgen.local_swarm import LocalSwarm
from swarm_panel.app.loadgen.swarm import LENGTH_PRESETS, SwarmConfig, run_swarm
from swarm_panel.runtime.workloads.critical_path import CriticalPathWorkload
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS, SwarmWorkload
from swarm_panel.ui.toolkit import theme

log = logging.getLogger(__name__)

OPEN_ENDED_S = 7 * 24 * 3600.0  # the launcher's swarm runs until stopped

MODES = (
    ("real", "real agents (natural stops)"),
    ("fixed", "fixed lengths (comparable)"),
    ("critical", "critical path + noisy neighbour"),
)
# The critical-path swarm runs round after round until stopped.
OPEN_ENDED_ROUNDS = 1 << 30
MODE_TIP = ("Real agents send multi-turn coding chats (a shared system prompt, varied tasks, short tool results) "
            "and stop when the model stops, so lengths vary as in a real swarm. Fixed lengths ignore the model's "
            "stop token and cycle through the lengths below, so runs under different policies compare exactly. "
            "Critical path: a coordinator plans, fans out one task to each of `agents` workers (the lengths "
            "below), waits for all, then merges, round after round, beside a noisy neighbour that keeps "
            "three times the lanes in requests open; the service plot shows each round's makespan.")
PRESET_TIPS = {"article": "the article's eight agents, 40..900 tokens", "tool calls": "short tool calls",
               "long plans": "long reasoning plans", "custom": "your own comma-separated lengths"}


def length_presets() -> dict[str, tuple[int, ...]]:
    return dict(LENGTH_PRESETS)


def parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(part) for part in text.replace(";", ",").replace(" ", ",").split(",") if part)
    except ValueError as exc:
        raise ValueError(f"lengths must be whole numbers separated by commas: {text!r}") from exc
    if not lengths or min(lengths) < 1:
        raise ValueError("lengths must be a non-empty list of positive token counts")
    return lengths


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        return None
    return loop if loop.is_running() else None


class SwarmLauncher(QtWidgets.QGroupBox):
    started = QtCore.Signal(str)  # "http" or "local"
    finished = QtCore.Signal(dict)
    round_done = QtCore.Signal(dict)  # a critical-path round: makespan, shares, Jain's index

    def __init__(self, engine_thread: Callable[[], Any], parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Swarm launcher", parent)
        self._engine_thread = engine_thread
        self.url: str | None = None
        self.api_key: str | None = None
        self.presets = length_presets()
        self.agents = QtWidgets.QSpinBox()
        self.agents.setRange(1, 64)
        self.agents.setValue(8)
        self.mode = QtWidgets.QComboBox()
        for key, label in MODES:
            self.mode.addItem(label, key)
        self.mode.setToolTip(MODE_TIP)
        # A long mode's name must not widen the dock; the popup shows it whole.
        self.mode.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.mode.setMinimumContentsLength(14)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        self.preset = QtWidgets.QComboBox()
        for name in [*self.presets, "custom"]:
            self.preset.addItem(name)
            self.preset.setItemData(self.preset.count() - 1, PRESET_TIPS.get(name, ""), QtCore.Qt.ItemDataRole.ToolTipRole)
        self.lengths = QtWidgets.QLineEdit(", ".join(map(str, ARTICLE_LENGTHS)))
        self.lengths.setToolTip("output tokens per request, cycled across agents and turns")
        self.spread = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.spread.setRange(0, 30)
        self.spread.setValue(10)
        self.spread_label = QtWidgets.QLabel()
        self.spread.valueChanged.connect(self._spread_changed)
        self.preset.currentTextChanged.connect(self._preset_changed)
        self.button = QtWidgets.QPushButton("Start swarm")
        self.button.setObjectName("primary")
        self.button.clicked.connect(self.toggle)
        self.status = QtWidgets.QLabel("idle")
        self.status.setWordWrap(True)
        self.status.setStyleSheet(f"color: {theme.TEXT_DIM}")

        spread_row = QtWidgets.QHBoxLayout()
        spread_row.addWidget(self.spread, 1)
        spread_row.addWidget(self.spread_label)
        form = QtWidgets.QFormLayout()
        form.addRow("agents", self.agents)
        form.addRow("mode", self.mode)
        form.addRow("lengths", self.preset)
        form.addRow("", self.lengths)
        form.addRow("spread", spread_row)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.button)
        layout.addWidget(self.status)
        self._local: LocalSwarm | None = None
        self._task: asyncio.Future | None = None
        self._stop_event: asyncio.Event | None = None
        self._spread_changed(self.spread.value())
        self._preset_changed(self.preset.currentText())
        self._mode_changed()

    # -- values --------------------------------------------------------------------------------

    def _spread_changed(self, value: int) -> None:
        self.spread_label.setText(f"{value / 10:.1f}")

    @property
    def real_agents(self) -> bool:
        return self.mode.currentData() == "real"

    @property
    def critical_path(self) -> bool:
        return self.mode.currentData() == "critical"

    def expect(self, agents: int) -> None:
        """Says the swarm is on its way while the engine loads (a first launch or --swarm starts it then)."""
        if not self.running:
            self.status.setText(f"{agents} agents start by themselves once the engine has loaded")

    def suit_engine(self, writes_text: bool) -> None:
        """Real agents on a model that writes real text; fixed lengths on the cost model or random weights."""
        if not self.running:
            self.mode.setCurrentIndex([key for key, _ in MODES].index("real" if writes_text else "fixed"))

    def _mode_changed(self) -> None:
        for widget in (self.preset, self.lengths, self.spread):
            widget.setEnabled(not self.real_agents)

    def _preset_changed(self, name: str) -> None:
        custom = name == "custom"
        self.lengths.setReadOnly(not custom)
        if not custom:
            self.lengths.setText(", ".join(map(str, self.presets[name])))
            self.lengths.setCursorPosition(0)

    def values(self) -> dict[str, Any]:
        return {"agents": self.agents.value(), "preset": self.preset.currentText(), "lengths": self.lengths.text(),
                "spread": self.spread.value() / 10, "mode": self.mode.currentData()}

    def set_values(self, values: dict[str, Any]) -> None:
        if "agents" in values:
            self.agents.setValue(int(values["agents"]))
        if values.get("preset") in [*self.presets, "custom"]:
            self.preset.setCurrentText(values["preset"])
        if values.get("preset") == "custom" and values.get("lengths"):
            self.lengths.setText(str(values["lengths"]))
        if "spread" in values:
            self.spread.setValue(round(float(values["spread"]) * 10))
        if values.get("mode") in [key for key, _ in MODES]:
            self.mode.setCurrentIndex([key for key, _ in MODES].index(values["mode"]))

    # -- running -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._local is not None or (self._task is not None and not self._task.done())

    def toggle(self) -> None:
        if self.running:
            self.stop()
        else:
            self.start()

    def start(self) -> str | None:
        """Starts the swarm; returns "http" or "local", or None with the reason shown."""
        if self.running:
            return "http" if self._task is not None else "local"
        try:
            lengths = parse_lengths(self.lengths.text())
        except ValueError as exc:
            self.status.setText(str(exc))
            return None
        agents, spread = self.agents.value(), self.spread.value() / 10
        loop = _running_loop()
        mode = "local"
        if self.url and loop is not None:
            try:
                config = SwarmConfig(url=self.url, agents=agents, lengths=lengths, spread=spread,
                                     api_key=self.api_key or None, seconds=OPEN_ENDED_S,
                                     real_agents=self.real_agents,
                                     critical_path=self._critical_path(agents, lengths, spread))
            except ValueError as exc:
                self.status.setText(f"Cannot start: {exc}")
                return None
            self._stop_event = asyncio.Event()
            self._task = asyncio.ensure_future(run_swarm(config, self._stop_event, self.round_done.emit))
            self._task.add_done_callback(self._http_done)
            mode = "http"
        if mode == "local" and (self.real_agents or self.critical_path):
            self.status.setText("This swarm talks to the endpoint, which is off: start it, or pick fixed lengths.")
            return None
        if mode == "local":
            try:
                self._local = LocalSwarm(self._engine_thread(), agents=agents, lengths=lengths, spread=spread)
            except (RuntimeError, ValueError) as exc:
                self.status.setText(f"Cannot start: {exc}")
                return None
            self._local.start()
        where = f"over HTTP at {self.url}" if mode == "http" else "in-process (no endpoint)"
        kind = ("workers, a coordinator and a noisy neighbour" if self.critical_path
                else "real agents" if self.real_agents else "agents")
        self.status.setText(f"{agents} {kind} running {where}")
        self.button.setText("Stop swarm")
        self.started.emit(mode)
        return mode

    def _critical_path(self, workers: int, lengths: tuple[int, ...], spread: float) -> CriticalPathWorkload | None:
        if not self.critical_path:
            return None
        spread_lengths = tuple(SwarmWorkload(lengths=lengths, spread=spread).effective_lengths)
        lanes = self._lanes()
        return CriticalPathWorkload(workers=workers, rounds=OPEN_ENDED_ROUNDS, worker_lengths=spread_lengths,
                                    noisy_lengths=spread_lengths, noisy_concurrency=3 * lanes)

    def _lanes(self) -> int:
        try:
            return self._engine_thread().config.num_lanes
        except RuntimeError:
            return 8

    def stop(self) -> None:
        """Agents send no new requests; the ones streaming finish (or fail when the engine stops)."""
        if self._local is not None:
            local, self._local = self._local, None
            local.stop()
            self._finish({"requests": local.requests, "errors": local.errors, "tokens": local.tokens})
        if self._stop_event is not None and not self._stop_event.is_set():
            self._stop_event.set()
            self.status.setText("Stopping: agents finish their current requests…")

    async def stop_and_wait(self, timeout: float = 5.0) -> None:
        """Stops and waits for the agents to end; cancels them if they take longer than `timeout`."""
        self.stop()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.wait([task], timeout=5.0)

    def _http_done(self, task: asyncio.Future) -> None:
        self._task = None
        self._stop_event = None
        if task.cancelled():
            self._finish({"stopped": True})
            return
        exc = task.exception()
        if exc is not None:
            log.warning("swarm failed: %s", exc)
            self._finish({"error": str(exc)})
            return
        report = task.result()
        self._finish(report.as_dict() if hasattr(report, "as_dict") else dict(report))

    def _finish(self, report: dict) -> None:
        self.button.setText("Start swarm")
        if "error" in report:
            self.status.setText(f"Swarm stopped: {report['error']}")
        elif report.get("stopped"):
            self.status.setText("Swarm stopped")
        else:
            tok_s = f", {report['tok_s']:.0f} tok/s" if isinstance(report.get("tok_s"), (int, float)) else ""
            self.status.setText(f"Done: {report.get('requests', 0)} requests, {report.get('errors', 0)} errors{tok_s}")
        self.finished.emit(report)

