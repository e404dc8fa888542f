"""A desktop of real parts from Debian's packages for the tests (this module holds no tests): Xvfb, a private D-Bus
session, dunst as its notification server and trayer as the tray host. `missing()` names what is not installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

PARTS = {"Xvfb": "xvfb", "dbus-daemon": "dbus", "dunst": "dunst", "trayer": "trayer", "xdotool": "xdotool",
         "dbus-monitor": "dbus", "dbus-send": "dbus"}
SCREEN = "1600x1000x24"
READY_S = 20.0


def missing() -> str:
    """What is not installed, as a skip reason; empty when everything is."""
    gone = {f"{binary} (Debian: {package})" for binary, package in PARTS.items() if shutil.which(binary) is None}
    return ", ".join(sorted(gone))


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + READY_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test desktop's {what} did not start")
        time.sleep(0.1)


def _owned(env: dict[str, str], name: str) -> bool:
    asked = subprocess.run(["dbus-send", "--session", "--print-reply", "--dest=org.freedesktop.DBus",
                            "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", f"string:{name}"],
                           env=env, capture_output=True, text=True)
    return "boolean true" in asked.stdout


@contextlib.contextmanager
def desktop(folder: Path) -> Iterator[dict[str, str]]:
    """The environment of a running desktop: DISPLAY, DBUS_SESSION_BUS_ADDRESS, a HOME and XDG folders of its own."""
    started: list[subprocess.Popen] = []
    try:
        read, write = os.pipe()
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", SCREEN, "-nolisten", "tcp"],
                                pass_fds=(write,), stderr=subprocess.DEVNULL)
        started.append(xvfb)
        os.close(write)
        with os.fdopen(read) as display:
            number = display.readline().strip()
        bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
        started.append(bus)
        address = bus.stdout.readline().strip()
        home = folder / "home"
        runtime = folder / "run"
        for path in (home, runtime):
            path.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        env = os.environ | {"DISPLAY": f":{number}", "DBUS_SESSION_BUS_ADDRESS": address, "HOME": str(home),
                            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
                            "XDG_RUNTIME_DIR": str(runtime), "QT_QPA_PLATFORM": "xcb",
                            "SWARM_PANEL_CONFIG_FILE": str(folder / "absent.toml")}
        started.append(subprocess.Popen(["dunst"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _owned(env, "org.freedesktop.Notifications"), "notification server (dunst)")
        started.append(subprocess.Popen(["trayer", "--edge", "bottom", "--align", "right", "--widthtype", "request",
                                         "--height", "28", "--SetDockType", "true", "--transparent", "false"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: subprocess.run(["xdotool", "search", "--classname", "trayer"], env=env,
                                     capture_output=True).returncode == 0, "tray host (trayer)")
        yield env
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
