"""The prefix cache: how much of each prompt came from KV kept since an earlier turn, and the switch."""

from __future__ import annotations

from collections.abc import Callable

from PySide6 import QtWidgets

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.serving.metrics import MetricsSnapshot
from swarm_panel.ui.toolkit import theme


class CachePanel(QtWidgets.QGroupBox):
    def __init__(self, apply: Callable[..., SchedulerConfig], parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__("Prefix cache (KV reuse across turns)", parent)
        self._apply = apply
        self.enabled = QtWidgets.QCheckBox("reuse shared prompt prefixes")
        self.enabled.setChecked(True)
        self.enabled.toggled.connect(self._toggled)
        self.figures = QtWidgets.QLabel("–")
        self.figures.setWordWrap(True)
        self.figures.setStyleSheet(f"color: {theme.TEXT_DIM}")
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.enabled)
        layout.addWidget(self.figures)

    def _toggled(self, on: bool) -> None:
        try:
            self._apply(prefix_cache=on)
        except (RuntimeError, ValueError) as exc:
            self.figures.setText(str(exc))

    def show_config(self, config: SchedulerConfig) -> None:
        if self.enabled.isChecked() != config.prefix_cache:
            self.enabled.blockSignals(True)
            self.enabled.setChecked(config.prefix_cache)
            self.enabled.blockSignals(False)

    def update_from(self, snap: MetricsSnapshot) -> None:
        queried, hits = snap.prefix_cache_queries, snap.prefix_cache_hits
        self.figures.setText(
            f"hit rate {snap.prefix_hit_rate:.0%} overall, {snap.prefix_window_hit_rate:.0%} lately\n"
            f"prompt tokens: {hits:,} reused, {queried - hits:,} computed\n"
            f"cached: {snap.cached_sequences} sequences, {snap.kv_cached:,} KV tokens ({snap.kv_cached_pct:.1f}%)"
            + (f"; {snap.parked_sequences} parked in host RAM ({snap.parked_bytes / 1e6:,.1f} MB)"
               if snap.parked_sequences else "")
        )
