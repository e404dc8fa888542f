"""What the panel remembers between runs (QSettings): policy, knobs, geometry, model, launcher values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6 import QtCore

ORGANIZATION = "swarm-panel"
APPLICATION = "swarm-panel"


class SettingsStore:
    def __init__(self, path: str | Path | None = None) -> None:
        if path is None:
            self._q = QtCore.QSettings(ORGANIZATION, APPLICATION)
        else:
            self._q = QtCore.QSettings(str(path), QtCore.QSettings.Format.IniFormat)

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
        value = self._q.value("window/geometry")
        return value if isinstance(value, QtCore.QByteArray) else None

    def set_geometry(self, geometry: QtCore.QByteArray) -> None:
        self._q.setValue("window/geometry", geometry)

    def sync(self) -> None:
        self._q.sync()
