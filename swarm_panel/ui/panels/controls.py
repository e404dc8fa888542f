"""Scheduler controls: the policy switch (every registered policy) and the knobs; changes apply at the next step."""

from __future__ import annotations

from collections.abc import Callable

from PySide6 import QtCore, QtWidgets

from swarm_panel.app.settings.fields import field_spec
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.policies.registry import POLICIES, POLICY_NAMES
from swarm_panel.ui.toolkit import theme

POLICY_TIPS = {name: f"<b>{policy.label}</b>: {policy.summary}" for name, policy in POLICIES.items()}
# A word or two each, so six buttons stay readable on a 1,280-pixel-wide window; the tooltip names them in full.
SHORT_LABELS = {"naive": "naive", "shrinking": "shrinking", "continuous": "continuous", "fair": "fair share",
                "las": "least served", "priority": "priority"}


class PolicySwitch(QtWidgets.QWidget):
    """The segmented switch: the seed's batching policies, then the agent-aware ones."""

    requested = QtCore.Signal(str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.buttons: dict[str, QtWidgets.QPushButton] = {}
        self.group = QtWidgets.QButtonGroup(self)
        self.group.setExclusive(True)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for name in POLICY_NAMES:
            button = QtWidgets.QPushButton(SHORT_LABELS.get(name, theme.POLICY_LABELS[name]))
            button.setObjectName("policyButton")
            button.setProperty("policy", name)
            button.setCheckable(True)
            button.setToolTip(POLICY_TIPS[name])
            # A push button's minimum is its text and padding, so the layout can never clip the label.
            button.setMinimumHeight(36)
            self.group.addButton(button)
            layout.addWidget(button)
            self.buttons[name] = button
        self.group.buttonClicked.connect(lambda b: self.requested.emit(b.property("policy")))

    @property
    def policy(self) -> str | None:
        button = self.group.checkedButton()
        return button.property("policy") if button else None

    def show_policy(self, policy: str) -> None:
        button = self.buttons[policy]
        if not button.isChecked():
            button.setChecked(True)


class SchedulerControls(QtWidgets.QGroupBox):
    """`apply(**changes)` is the scheduler's reconfigure; `show_config` syncs from whatever changed it.

    The policy switch is a separate widget (the window puts it in its header) driven from here.
    """

    changed = QtCore.Signal(object)  # the SchedulerConfig just asked for

    def __init__(self, apply: Callable[..., SchedulerConfig], parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Scheduler knobs", parent)
        self._apply = apply
        self.switch = PolicySwitch()
        self.switch.requested.connect(lambda policy: self._request(policy=policy))
        self.buttons = self.switch.buttons
        self.num_lanes = self._spin("num_lanes")
        self.prefill_chunk = self._spin("prefill_chunk", step=64)
        # 0 stands for "none" (all the engine has): a spin box has no empty value.
        self.kv_budget = self._spin("kv_budget", lo=0, hi=10_000_000, step=1024)
        self.kv_budget.setSpecialValueText("all")
        self.num_lanes.valueChanged.connect(lambda v: self._request(num_lanes=int(v)))
        self.prefill_chunk.valueChanged.connect(lambda v: self._request(prefill_chunk=int(v)))
        self.kv_budget.valueChanged.connect(lambda v: self._request(kv_budget=int(v) or None))
        self.message = QtWidgets.QLabel("Changes apply at the next step; PUT /v1/scheduler does the same.")
        self.message.setWordWrap(True)
        self.message.setStyleSheet(f"color: {theme.TEXT_DIM}")

        knobs = QtWidgets.QFormLayout()
        knobs.addRow("lanes", self.num_lanes)
        knobs.addRow("prefill chunk (tokens)", self.prefill_chunk)
        knobs.addRow("KV budget (tokens)", self.kv_budget)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(knobs)
        layout.addWidget(self.message)
        self._shown: SchedulerConfig | None = None

    @staticmethod
    def _spin(field: str, lo: int | None = None, hi: int | None = None, step: int = 1) -> QtWidgets.QSpinBox:
        spec = field_spec(field)
        spin = QtWidgets.QSpinBox()
        spin.setRange(int(spec.ge if lo is None else lo), int(spec.le if hi is None else hi))
        tip = spec.help
        spin.setSingleStep(step)
        spin.setKeyboardTracking(False)
        spin.setToolTip(tip)
        spin.setAccelerated(True)
        return spin

    def set_limits(self, max_lanes: int, kv_capacity: int) -> None:
        for spin, hi in ((self.num_lanes, max_lanes), (self.kv_budget, kv_capacity)):
            spin.blockSignals(True)
            spin.setMaximum(max(1, hi))
            spin.blockSignals(False)

    @property
    def policy(self) -> str | None:
        return self.switch.policy

    def _request(self, **changes: object) -> None:
        try:
            config = self._apply(**changes)
        except (ValueError, RuntimeError) as exc:
            self.message.setText(f"Not applied: {exc}")
            self.message.setStyleSheet("color: #ff8a80")
            if self._shown is not None:
                self.show_config(self._shown, force=True)
            return
        self.message.setText("Applied; takes effect at the next step.")
        self.message.setStyleSheet(f"color: {theme.TEXT_DIM}")
        self.show_config(config, force=True)
        self.changed.emit(config)

    def show_config(self, config: SchedulerConfig, force: bool = False) -> None:
        """Syncs the widgets to a config (from the panel or HTTP); leaves a knob being edited alone."""
        if config == self._shown and not force:
            return
        self._shown = config
        self.switch.show_policy(config.policy)
        for spin, value in ((self.num_lanes, config.num_lanes), (self.prefill_chunk, config.prefill_chunk),
                            (self.kv_budget, config.kv_budget or 0)):
            if spin.value() != value and (force or not spin.hasFocus()):
                spin.blockSignals(True)
                spin.setValue(value)
                spin.blockSignals(False)
