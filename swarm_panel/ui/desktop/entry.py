"""The menu entry, its icon and the start-at-login entry, where the freedesktop specifications put a user's own:
the Desktop Entry in $XDG_DATA_HOME/applications, the icon in the hicolor theme under $XDG_DATA_HOME/icons, the
autostart entry in $XDG_CONFIG_HOME/autostart. Both entries run the installed command by its absolute path, since a
desktop session's PATH rarely holds a virtual environment's bin folder. Imports no Qt.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

APP_ID = "swarm-panel"
# Drawn by packaging/make_icon.py; the window, the tray and the menu entry show it.
ICON_FILE = Path(__file__).with_name("icon.png")
ENTRY_FILE = f"{APP_ID}.desktop"
# Characters the Desktop Entry spec reserves in Exec: an argument holding one is quoted.
RESERVED = frozenset(" \t\"'\\><~|&;$*?#()`")


@dataclass(frozen=True)
class Places:
    entry: Path  # the menu entry
    icon: Path
    autostart: Path  # the start-at-login entry

    def all(self) -> tuple[Path, Path, Path]:
        return self.entry, self.icon, self.autostart


def _xdg(variable: str, fallback: Path) -> Path:
    # The Base Directory spec: a relative path in the variable is invalid and ignored.
    value = os.environ.get(variable, "")
    return Path(value) if os.path.isabs(value) else fallback


def places() -> Places:
    data = _xdg("XDG_DATA_HOME", Path.home() / ".local" / "share")
    config = _xdg("XDG_CONFIG_HOME", Path.home() / ".config")
    return Places(entry=data / "applications" / ENTRY_FILE,
                  icon=data / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png",
                  autostart=config / "autostart" / ENTRY_FILE)


def installed_command() -> list[str]:
    """The command that started this program, by absolute path: the bundle's executable, the console script of this
    environment, the one on PATH, else this interpreter running the package."""
    if getattr(sys, "frozen", False):
        return [str(Path(sys.executable).absolute())]
    beside = Path(sys.executable).absolute().parent / APP_ID
    for candidate in (Path(sys.argv[0]) if Path(sys.argv[0]).name == APP_ID else None, beside):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate.absolute())]
    found = shutil.which(APP_ID)
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "swarm_panel"]


def _string(value: str) -> str:
    """A value of the spec's string type: a backslash is written doubled; a line break cannot be written at all."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"{value!r} holds a line break, which a desktop entry cannot hold")
    return value.replace("\\", "\\\\")


def exec_line(argv: list[str]) -> str:
    """argv as the Exec key's value: `%` doubled (it starts field codes), an argument with a reserved character
    double-quoted with `"`, `` ` ``, `$` and `\\` escaped inside, then the string type's own escape."""
    words = []
    for arg in argv:
        arg = arg.replace("%", "%%")
        if not arg or any(c in RESERVED for c in arg):
            arg = '"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"'
        words.append(arg)
    return _string(" ".join(words))


def entry_text(argv: list[str]) -> str:
    return "\n".join((
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",
        f"Name={APP_ID}",
        "GenericName=Agent swarm control panel",
        "Comment=Continuous batching for a swarm of local coding agents: live plots, lane timeline, policy switch",
        f"TryExec={_string(argv[0])}",
        f"Exec={exec_line(argv)}",
        f"Icon={APP_ID}",
        "Terminal=false",
        "StartupNotify=true",
        "Categories=Development;",
        "Keywords=llm;llama.cpp;batching;agents;openai;",
        "",
    ))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_bytes(data)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def install(autostart: bool) -> tuple[list[Path], list[Path]]:
    """Writes the menu entry and the icon, and the autostart entry if asked (an earlier one is removed if not):
    the paths written, then the paths removed. Raises OSError where a folder cannot be written."""
    where = places()
    text = entry_text(installed_command()).encode()
    written = [where.entry, where.icon]
    _write(where.entry, text)
    _write(where.icon, ICON_FILE.read_bytes())
    removed = []
    if autostart:
        _write(where.autostart, text)
        written.append(where.autostart)
    elif where.autostart.exists():
        where.autostart.unlink()
        removed.append(where.autostart)
    return written, removed


def set_autostart(on: bool) -> Path:
    """Writes or removes the start-at-login entry alone; its path."""
    where = places().autostart
    if on:
        _write(where, entry_text(installed_command()).encode())
    else:
        where.unlink(missing_ok=True)
    return where


def autostart_installed() -> bool:
    return places().autostart.is_file()


def uninstall() -> list[Path]:
    """Removes whatever of the three is there; the paths removed."""
    removed = []
    for path in places().all():
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed
