"""What the panel remembers between runs (QSettings): policy, knobs, model, launcher values, and per screen
the window's geometry and its docks' arrangement."""

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
