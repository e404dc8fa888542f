"""The main window on its screen: the layout kept per screen, else a first launch's for the screen's
size, the docks sized once shown, and the frame kept within the available area."""

from __future__ import annotations

from PySide6 import QtCore, QtGui

from swarm_panel.ui.shell.docks import arrange, size_docks
from swarm_panel.ui.toolkit.screen_fit import fit_rect, roomy, screen_key

# What a first launch takes of a screen with room to spare (at least MIN_SHARE_SIZE); a smaller screen
# gets all of its available area.
SCREEN_SHARE = 0.88
MIN_SHARE_SIZE = (1680, 1000)
# saveState's version: a layout kept by a build with other docks is not restored into this one.
LAYOUT_VERSION = 2


class ScreenFit:
    """Where the main window lies and how its docks are arranged (a mixin of MainWindow)."""

    def place_on(self, screen: QtGui.QScreen) -> None:
        """The layout last kept on this screen, else the first launch's for its size; never beyond its
        available area."""
        available = screen.availableGeometry()
        self.setScreen(screen)
        kept = self.store.layout(screen_key(screen)) if self.store is not None else {}
        if not (kept and self._restore_layout(kept)):
            self._arrange(available)
        self.fit_within(available)
        if self.isVisible():
            self._fit_to_screen()

    def _restore_layout(self, parts: dict[str, QtCore.QByteArray]) -> bool:
        if not (self.restoreGeometry(parts.get("geometry", QtCore.QByteArray()))
                and self.restoreState(parts.get("state", QtCore.QByteArray()), LAYOUT_VERSION)):
            return False
        for name, splitter in self.splitters.items():
            if name in parts:
                splitter.restoreState(parts[name])
        self.agents.auto_split = "agents" not in parts
        return True

    def layout_parts(self) -> dict[str, QtCore.QByteArray]:
        parts = {"geometry": self.saveGeometry(), "state": self.saveState(LAYOUT_VERSION)}
        return parts | {name: splitter.saveState() for name, splitter in self.splitters.items()}

    def _arrange(self, available: QtCore.QRect) -> None:
        arrange(self, self.docks, roomy(available))
        if not roomy(available):
            # Its height goes to the four live plots and the lane timeline; the View menu brings it back.
            self.plot_actions["service"].setChecked(False)
        width, height = (min(room, max(least, round(room * SCREEN_SHARE)))
                         for least, room in zip(MIN_SHARE_SIZE, (available.width(), available.height())))
        frame = QtCore.QRect(0, 0, width, height)
        frame.moveCenter(available.center())
        self.setGeometry(frame)
        self._fresh_layout = True

    def reset_layout(self) -> None:
        for action in self.plot_actions.values():
            action.setChecked(True)
        self.agents.set_hidden_columns([])
        self._arrange(self.screen().availableGeometry())
        self._fit_to_screen()

    def fit_within(self, available: QtCore.QRect) -> None:
        """Shrinks, then moves, the window so its frame (title bar included, where known) lies within `available`."""
        if self.isMaximized() or self.isFullScreen():
            return
        frame = self.frameGeometry() if self.isVisible() else self.geometry()
        inner = self.geometry()
        margins = QtCore.QMargins(inner.left() - frame.left(), inner.top() - frame.top(),
                                  frame.right() - inner.right(), frame.bottom() - inner.bottom())
        target = fit_rect(frame, margins, available)
        if target != inner:
            self.setGeometry(target)

    def showEvent(self, event: QtGui.QShowEvent) -> None:
        super().showEvent(event)
        # The window manager's frame is known once shown: keep the title bar on the screen too.
        QtCore.QTimer.singleShot(0, self, self._fit_to_screen)

    @property
    def layout_settled(self) -> bool:
        """Shown, and a first arrangement given its docks' and splitters' sizes."""
        return self.isVisible() and not self._fresh_layout

    def _fit_to_screen(self) -> None:
        if self.fits_screen:
            self.fit_within(self.screen().availableGeometry())
        if self._fresh_layout and self.isVisible():
            # The splitter's heights exist once the window is laid out at its size.
            self.layout().activate()
            size_docks(self, self.docks, roomy(self.screen().availableGeometry()))
            # The service plot and the lane timeline a fifth of the height each (their minimum on a small
            # screen), the live plots the rest.
            centre = self.splitters["centre"]
            height = sum(centre.sizes())
            lower = [max(widget.minimumSizeHint().height(), height * 22 // 100) if widget.isVisible() else 0
                     for widget in (self.service_plot, self.timeline)]
            centre.setSizes([height - sum(lower), *lower])
            self.layout().activate()
            self.agents.give_table_its_rows()
            self._fresh_layout = False
