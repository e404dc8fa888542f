"""What the panel remembers between runs (QSettings): policy, knobs, model, launcher values, and per screen
the window's geometry and its docks' arrangement.

Qt writes the file itself, so the careful writer cannot: a file Qt cannot parse, or holding a value that is not
the JSON this store writes, is set aside (kept, renamed) and the panel opens on its defaults; a file Qt cannot
write is told to the status bar as any other unwritable folder (runtime.core.careful_write).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from PySide6 import QtCore

from swarm_panel.runtime.core.careful_write import report, set_aside

log = logging.getLogger(__name__)
LOST = "the panel's settings will not be remembered"

ORGANIZATION = "swarm-panel"
APPLICATION = "swarm-panel"


class SettingsStore:
    def __init__(self, path: str | Path | None = None) -> None:
        self._path = path
        self._q = self._open()
        why = self._damage()
        if why is not None and set_aside(self._q.fileName(), why) is not None:
            self._q = self._open()

    def _open(self) -> QtCore.QSettings:
        if self._path is None:
            return QtCore.QSettings(ORGANIZATION, APPLICATION)
        return QtCore.QSettings(str(self._path), QtCore.QSettings.Format.IniFormat)

    def _damage(self) -> str | None:
        if self._q.status() == QtCore.QSettings.Status.FormatError:
            return "Qt cannot parse it"
        for key in self._q.allKeys():
            raw = self._q.value(key)
            # The layout's parts (window geometry, dock and splitter state) are Qt's bytes, not JSON.
            if raw is None or isinstance(raw, QtCore.QByteArray):
                continue
            try:
                json.loads(raw)
            except (TypeError, ValueError):
                return f"the value of {key!r} is not what the panel writes"
        return None

    @property
    def file_name(self) -> str:
        """The file Qt keeps it in: one panel runs per file (ui.desktop.single_instance)."""
        return self._q.fileName()

    def get(self, key: str, default: Any = None) -> Any:
        raw = self._q.value(key)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except (TypeError, ValueError):
            return default

    def set(self, key: str, value: Any) -> None:
        self._q.setValue(key, json.dumps(value))

    def layout(self, screen: str) -> dict[str, QtCore.QByteArray]:
        """The parts of the window's layout last kept on this screen (a screen_fit.screen_key): its geometry,
        its docks' state and its splitters', by name; empty if none was kept there."""
        self._q.beginGroup(f"layout/{screen}")
        try:
            parts = {key: self._q.value(key) for key in self._q.childKeys()}
        finally:
            self._q.endGroup()
        return {key: value for key, value in parts.items() if isinstance(value, QtCore.QByteArray)}

    def set_layout(self, screen: str, parts: dict[str, QtCore.QByteArray]) -> None:
        for key, value in parts.items():
            self._q.setValue(f"layout/{screen}/{key}", value)

    def sync(self) -> None:
        self._q.sync()
        if self._q.status() == QtCore.QSettings.Status.AccessError:
            # Qt says only that it failed: a full disk and a read-only folder look alike here.
            where = Path(self._q.fileName())
            report(where.parent, OSError(f"Qt could not write {where.name}"), LOST)
