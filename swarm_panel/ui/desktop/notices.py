"""Notifications: through the desktop's notification server (org.freedesktop.Notifications on the session bus) with
a default action, so that clicking one opens what it is about; without a server, the tray icon's own message where
there is a tray; otherwise none. Each kind can be turned off (the Desktop menu), and none is shown while the panel's
window has the focus: the user is looking at it already.

Qt's D-Bus binding cannot send the spec's uint32 from Python, so the bus is spoken with jeepney (pure Python): sends
on a worker thread, the clicks read on jeepney's receiving thread, both handed to the GUI thread by queued signals.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable

from PySide6 import QtCore, QtWidgets

from swarm_panel.ui.desktop.entry import APP_ID, ICON_FILE

log = logging.getLogger(__name__)

KINDS = {"agent_finished": "An agent finished", "agent_failed": "An agent failed",
         "engine": "The engine stopped or crashed", "download": "A model download finished or failed"}
SHOWN_MS = 10_000
SEND_TIMEOUT_S = 5.0  # the bus may start the server first (D-Bus activation)
KEPT_IDS = 64  # notifications whose click is still answered
SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"


class SessionBus:
    """The notification server on the session bus, through one jeepney router."""

    def __init__(self) -> None:
        from jeepney import DBusAddress, MatchRule
        from jeepney.bus_messages import message_bus
        from jeepney.io.threading import DBusRouter, open_dbus_connection

        self._address = DBusAddress(PATH, bus_name=SERVICE, interface=SERVICE)
        self._connection = open_dbus_connection(bus="SESSION")
        self._router = DBusRouter(self._connection)
        rule = MatchRule(type="signal", interface=SERVICE, path=PATH, member="ActionInvoked")
        self._router.send_and_get_reply(message_bus.AddMatch(rule), timeout=SEND_TIMEOUT_S)
        self.clicks: queue.Queue = queue.Queue()
        self._filter = self._router.filter(rule, queue=self.clicks, bufsize=KEPT_IDS)

    def notify(self, title: str, body: str, clickable: bool) -> int:
        """The server's id for the notification; raises when no server answers."""
        from jeepney import new_method_call
        from jeepney.wrappers import unwrap_msg

        actions = ["default", "Open"] if clickable else []
        message = new_method_call(self._address, "Notify", "susssasa{sv}i",
                                  (APP_ID, 0, ICON_FILE.as_uri(), title, body, actions,
                                   {"desktop-entry": ("s", APP_ID)}, SHOWN_MS))
        return unwrap_msg(self._router.send_and_get_reply(message, timeout=SEND_TIMEOUT_S))[0]

    def close(self) -> None:
        self._filter.close()
        self._router.close()
        self._connection.close()
        self.clicks.put(None)


def open_session_bus() -> SessionBus | None:
    try:
        return SessionBus()
    except Exception as exc:  # no jeepney, no bus, a bus that refuses: the tray's messages, or none
        log.info("no session bus for notifications: %s", exc)
        return None


class Notifier(QtCore.QObject):
    clicked = QtCore.Signal(str)  # the key given with the notification clicked
    sent = QtCore.Signal(str, str)  # shown: where ("bus" or "tray") and its title
    _done = QtCore.Signal(object, str, str, str)  # from the sending thread: future, key, title, body
    _invoked = QtCore.Signal(object, str)  # from the listening thread: id (a uint32), action

    def __init__(self, focused: Callable[[], bool], tray: QtWidgets.QSystemTrayIcon | None = None,
                 bus: SessionBus | None = None, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.focused = focused
        self.tray = tray
        self.bus = bus
        self.off: set[str] = set()
        self._keys: OrderedDict[int, str] = OrderedDict()
        self._tray_key = ""
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify")
        self._done.connect(self._sent)
        self._invoked.connect(self._click)
        if tray is not None:
            tray.messageClicked.connect(lambda: self.clicked.emit(self._tray_key))
        if bus is not None:
            threading.Thread(target=self._listen, args=(bus,), name="notify-clicks", daemon=True).start()

    def notify(self, kind: str, title: str, body: str, key: str = "") -> bool:
        """Shows it unless its kind is off or the window has the focus; whether it was sent."""
        if kind not in KINDS:
            raise ValueError(f"unknown notification kind {kind!r}; one of {', '.join(KINDS)}")
        if kind in self.off or self.focused():
            return False
        if self.bus is None:
            return self._to_tray(key, title, body)
        future = self._pool.submit(self.bus.notify, title, body, bool(key))
        future.add_done_callback(lambda f: self._done.emit(f, key, title, body))
        return True

    def _sent(self, future: concurrent.futures.Future, key: str, title: str, body: str) -> None:
        error = future.exception()
        if error is not None:
            log.info("the notification server did not take %r (%s)", title, error)
            self._to_tray(key, title, body)
            return
        self._keys[future.result()] = key
        while len(self._keys) > KEPT_IDS:
            self._keys.popitem(last=False)
        self.sent.emit("bus", title)

    def _to_tray(self, key: str, title: str, body: str) -> bool:
        if self.tray is None or not self.tray.isVisible():
            log.info("no notification server and no tray: %s", title)
            return False
        self._tray_key = key
        self.tray.showMessage(title, body, self.tray.icon(), SHOWN_MS)
        self.sent.emit("tray", title)
        return True

    def _listen(self, bus: SessionBus) -> None:
        while (message := bus.clicks.get()) is not None:
            notification, action = message.body
            self._invoked.emit(notification, action)

    def _click(self, notification: int, action: str) -> None:
        if action == "default" and notification in self._keys:
            self.clicked.emit(self._keys[notification])

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.bus is not None:
            self.bus.close()
            self.bus = None
