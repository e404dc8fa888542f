"""What the panel remembers between runs (QSettings): policy, knobs, geometry, model, launcher values.

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
GEOMETRY = "window/geometry"  # a QByteArray of Qt's, the one value not written as JSON
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
            if key == GEOMETRY or raw is None:
                continue
            try:
                json.loads(raw)
            except (TypeError, ValueError):
                return f"the value of {key!r} is not what the panel writes"
        return None

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

    def geometry(self) -> QtCore.QByteArray | None:
        value = self._q.value(GEOMETRY)
        return value if isinstance(value, QtCore.QByteArray) else None

    def set_geometry(self, geometry: QtCore.QByteArray) -> None:
        self._q.setValue(GEOMETRY, geometry)

    def sync(self) -> None:
        self._q.sync()
        if self._q.status() == QtCore.QSettings.Status.AccessError:
            # Qt says only that it failed: a full disk and a read-only folder look alike here.
            where = Path(self._q.fileName())
            report(where.parent, OSError(f"Qt could not write {where.name}"), LOST)
