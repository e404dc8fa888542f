"""What the main window remembers between runs (its store: layout, hidden plots, the launcher's and
the engine's choices) and how it closes: the close guard's question, then one shutdown."""

from __future__ import annotations

import logging

from PySide6 import QtGui

from swarm_panel.app.settings.backends import format_backend
from swarm_panel.app.settings.schema import scheduler_values
from swarm_panel.ui.panels.engine_panel import choice_for
from swarm_panel.ui.toolkit.screen_fit import screen_key

log = logging.getLogger(__name__)


class WindowLife:
    """The main window's settings and shutdown (a mixin of MainWindow)."""

    def _restore(self) -> None:
        # The remembered list reaches the settings through the app (ui/app_main._settings), as config.toml's does.
        if self.service.settings.backends:
            self.engine_panel.backends.set_backends(self.service.settings.backends)
        if self.store is None:
            return
        for name in self.store.get("plots_hidden", []) or []:
            if name in self.plot_actions:
                self.plot_actions[name].setChecked(False)
        self.agents.set_hidden_columns(self.store.get("agents_hidden_columns", []) or [])
        self.launcher.set_values(self.store.get("swarm", {}))
        self.harness.set_values(self.store.get("coding_agents", {}) or {})
        self.ab.seconds.setValue(int(self.store.get("ab_seconds", self.ab.seconds.value())))
        model = self.store.get("model_path", "") or ""
        if choice_for("llama", model or None) == "gguf":
            self.engine_panel.path.setText(model)

    def save_settings(self) -> None:
        if self.store is None:
            return
        self.store.set_layout(screen_key(self.screen()), self.layout_parts())
        self.store.set("plots_hidden", [name for name, action in self.plot_actions.items() if not action.isChecked()])
        self.store.set("agents_hidden_columns", self.agents.hidden_columns())
        self.store.set("swarm", self.launcher.values())
        self.store.set("coding_agents", self.harness.values())
        self.store.set("ab_seconds", self.ab.seconds.value())
        settings = self.service.settings
        self.store.set("engine", settings.engine)
        self.store.set("kv_unified", settings.kv_unified)
        self.store.set("threads", settings.threads or 0)
        self.store.set("extra_buffers", settings.extra_buffers)
        self.store.set("kv_type", settings.kv_type)
        # Empty means the bundled model; "demo" the random-weight one.
        self.store.set("model_path", str(settings.model) if settings.model else "")
        if self.service.loaded:
            self.store.set("scheduler", scheduler_values(self.service.engine_thread.config))
        self.store.set("fleet", self.fleet.active)
        try:
            backends = self.engine_panel.backends.backends()
        except ValueError:
            backends = None  # an unfinished edit must not replace the list remembered
        if backends is not None:
            self.store.set("backends", [format_backend(b) for b in backends])
        self.store.sync()

    def shutdown(self) -> None:
        """Stops the timer, the swarm, the A/B run and the engine; the app stops the HTTP server."""
        self.timer.stop()
        if self.ab.running:
            self.ab.abort()
        self.launcher.stop()  # agents stop asking; stopping the engine below ends their open requests
        self.harness.shutdown()
        try:
            self.save_settings()
        except Exception:  # never let a settings problem keep the engine running
            log.exception("could not save settings")
        self.fleet.stop()
        self.service.stop()

    def quit(self) -> None:
        """Quit asked for outright (the menu, the tray): the close guard may still ask, but never offers the tray."""
        self._outright = True
        try:
            self.close()
        finally:
            self._outright = False

    def quit_now(self) -> None:
        """Quits without asking (Ctrl-C in the terminal, a scripted capture, an error on the way)."""
        self._forced = True
        self.close()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        if self.shut:
            event.accept()
            return
        if not self._forced and self.close_guard is not None and not self.close_guard(self._outright):
            event.ignore()
            return
        self.shut = True
        self.shutdown()
        event.accept()
        self.closed.emit()
