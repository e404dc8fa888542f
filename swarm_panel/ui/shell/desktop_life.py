"""The window's life on the desktop: the tray icon, the notifications, the question a close asks while work runs,
and the window raised for a second launch. It polls the window once a second; the window knows none of it beyond
the close guard it is handed.
"""

from __future__ import annotations

import concurrent.futures
import math

from PySide6 import QtCore

from swarm_panel.app.harness.launcher import EXITED, HarnessRun
from swarm_panel.app.workspace.changes import Changes, changes
from swarm_panel.app.workspace.git import WorkspaceError
from swarm_panel.runtime.policies.registry import POLICIES
from swarm_panel.ui.desktop import agent_outcomes, tray
from swarm_panel.ui.desktop.close_dialog import CANCEL, TRAY, Ask, ask_in_dialog, decide
from swarm_panel.ui.desktop.engine_state import EngineWatch, read
from swarm_panel.ui.desktop.notices import Notifier, open_session_bus
from swarm_panel.ui.desktop.running_work import RunningWork
from swarm_panel.ui.desktop.single_instance import Instance
from swarm_panel.ui.shell.desktop_menu import DesktopMenu
from swarm_panel.ui.shell.main_window import MainWindow

POLL_MS = 1000


class DesktopLife(QtCore.QObject):
    _read = QtCore.Signal(object)  # from the worker thread: (run, its changes or None)

    def __init__(self, window: MainWindow, instance: Instance | None = None, *, with_tray: bool | None = None,
                 notifier: Notifier | None = None) -> None:
        """with_tray: None shows a tray icon where the desktop has a tray; notifier: None speaks to the session bus."""
        super().__init__(window)
        self.window = window
        self.ask: Ask = ask_in_dialog(window)
        shown = tray.available() if with_tray is None else with_tray
        self.tray = tray.PanelTray({name: p.label for name, p in POLICIES.items()}, self) if shown else None
        self.notifier = notifier or Notifier(self.focused, self.tray.icon if self.tray else None, open_session_bus(),
                                             self)
        self.notifier.clicked.connect(self.open)
        self.engine = EngineWatch()
        self.ends = agent_outcomes.Ends()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-ends")
        self._read.connect(self._changes_read)
        self._told_hidden = False
        self.quitting = False
        window.close_guard = self.may_close
        hub = window.engine_panel.hub
        hub.downloaded.connect(
            lambda path: self.notifier.notify("download", "Model downloaded", f"{path} is ready to load."))
        hub.failed.connect(
            lambda name, why: self.notifier.notify("download", "Model download failed", f"{name}: {why}"))
        if instance is not None:
            instance.answer = lambda: window.url or ""
            instance.raise_requested.connect(self.show_window)
        if self.tray is not None:
            self.tray.show_requested.connect(self.show_window)
            self.tray.policy_chosen.connect(self.switch_policy)
            self.tray.pause_toggled.connect(self.pause)
            self.tray.quit_requested.connect(window.quit)
            self.tray.show()
        self.menu = DesktopMenu(window, self.notifier, self.tray is not None)
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self.timer.start()
        self.poll()

    # -- the window ------------------------------------------------------------------------------

    def focused(self) -> bool:
        window = self.window
        return window.isVisible() and not window.isMinimized() and window.isActiveWindow()

    def show_window(self) -> None:
        window = self.window
        window.show()
        window.setWindowState(window.windowState() & ~QtCore.Qt.WindowState.WindowMinimized)
        window.raise_()
        window.activateWindow()

    def open(self, key: str) -> None:
        """A notification clicked: the window, and the dock it is about with its agent selected."""
        self.show_window()
        where, _, name = key.partition(":")
        if where == agent_outcomes.REVIEW:
            self.window.raise_dock("review")
            self.window.harness.worktrees.select(name)
        elif where == agent_outcomes.CODING:
            self.window.raise_dock("coding")
            self.window.harness.select(name)

    def running_work(self) -> RunningWork:
        window = self.window
        return RunningWork(coding_agents=sum(not run.finished for run in window.harness.launcher.runs),
                           swarm_agents=window.launcher.agents.value() if window.launcher.running else 0,
                           requests=sum(window.service.inflight.snapshot().values()),
                           download=window.engine_panel.hub.downloading)

    def may_close(self, outright: bool) -> bool:
        """The window's close guard: True lets it quit; False keeps it, shown or hidden in the tray."""
        tray_shown = self.tray is not None and self.tray.icon.isVisible()
        answer, remember = decide(self.running_work(), self.menu.on_close, tray_shown, outright, self.ask)
        if remember:
            self.menu.remember_close(answer)
        if answer == CANCEL:
            return False
        if answer == TRAY:
            self.window.hide()
            if not self._told_hidden:
                self._told_hidden = True
                self.tray.icon.showMessage("swarm-panel keeps serving", f"The endpoint stays at {self.window.url}; "
                                           "the tray icon brings the window back.", self.tray.icon.icon(), 5000)
            return False
        self.quitting = True
        self.timer.stop()
        self.notifier.close()
        if self.tray is not None:
            self.tray.hide()
        return True

    # -- what the tray and the menu do -----------------------------------------------------------

    def switch_policy(self, policy: str) -> None:
        try:
            self.window.apply_scheduler(policy=policy)
        except (ValueError, RuntimeError) as exc:
            self.window.statusBar().showMessage(f"policy not switched: {exc}", 5000)
        self.poll()

    def pause(self, paused: bool) -> None:
        http = self.window.http
        if http is None:
            return
        if paused:
            http.pause()
        else:
            http.resume()
        self.poll()

    # -- the poll --------------------------------------------------------------------------------

    def poll(self) -> None:
        if self.quitting:
            return
        window = self.window
        reading = read(window.service, window.loading, window.fleet.active)
        for notice in self.engine.update(reading):
            self.notifier.notify("engine", notice.title, notice.body)
        for run in self.ends.new(window.harness.launcher.runs):
            self._tell_end(run)
        if self.tray is not None:
            tok_s = window.feed.latest("tok_s")
            policy = "" if window.fleet.active else window.current_policy()
            paused = window.http is not None and window.http.paused
            self.tray.show_state(reading.state, reading.detail)
            self.tray.pause_action.setEnabled(window.http is not None)
            self.tray.show_figures(None if math.isnan(tok_s) else tok_s, len(window.service.inflight.snapshot()),
                                   policy, paused)

    def _tell_end(self, run: HarnessRun) -> None:
        if run.status != EXITED or run.exit_code != 0:
            self._notify(agent_outcomes.failed(run))
            return
        workspace = run.workspace

        def read_changes() -> Changes | None:
            try:
                return changes(workspace) if workspace is not None else None
            except (WorkspaceError, OSError):  # its tree removed meanwhile, or git gone: told without figures
                return None

        future = self._pool.submit(read_changes)
        future.add_done_callback(lambda f: self._read.emit((run, f.result())))

    def _changes_read(self, result: tuple[HarnessRun, Changes | None]) -> None:
        run, found = result
        if not self.quitting:
            self._notify(agent_outcomes.finished(run, found))

    def _notify(self, outcome: agent_outcomes.Outcome) -> None:
        self.notifier.notify(outcome.kind, outcome.title, outcome.body, outcome.key)

    def close(self) -> None:
        self.timer.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.notifier.close()
        if self.tray is not None:
            self.tray.hide()
