"""Draws assets/screenshot-close-dialog.png and assets/screenshot-tray-menu.png: the question a close asks while the
built-in swarm runs, and the tray icon's menu opened by a right click, on a desktop of real parts (Xvfb, a private
D-Bus session, dunst, trayer: tests/ui/desktop/desktop_session.py) with the modeled card serving.

Needs xvfb, dbus, dunst, trayer, xdotool and imagemagick.

    python benchmarks/desktop_screenshots.py [--out assets]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test desktop lives with the tests

from tests.ui.desktop.desktop_session import desktop, missing  # noqa: E402

SWARM_S = 6  # the plots filled before the first grab
MENU_CROP = "600x420+1000+580"  # the tray's corner of the 1600 x 1000 screen: the menu, the tray, the window


def grab(env: dict[str, str], path: Path, crop: str | None = None) -> None:
    subprocess.run(["import", "-window", "root", *(["-crop", crop] if crop else []), str(path)], env=env, check=True)
    subprocess.run(["convert", str(path), "+repage", "-colors", "128", f"PNG8:{path}"], check=True)
    print(path)


def shoot(env: dict[str, str], out: Path) -> None:
    from PySide6 import QtCore, QtWidgets

    from swarm_panel.ui.desktop.close_dialog import CloseDialog
    from swarm_panel.ui.shell.desktop_life import DesktopLife
    from swarm_panel.ui.shell.main_window import MainWindow
    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.settings_store import SettingsStore
    from tests.ui.test_ui_common import STEADY_CARD, fast_service

    app = QtWidgets.QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    app.setStyle("Fusion")
    app.setStyleSheet(theme.STYLESHEET)
    theme.configure_pyqtgraph()
    service = fast_service(STEADY_CARD, policy="continuous")
    service.start()
    window = MainWindow(service, SettingsStore(Path(env["HOME"]) / "panel.ini"))
    window.set_endpoint("http://127.0.0.1:8000")
    life = DesktopLife(window)
    window.show()
    # No window manager keeps the window off the tray host's strip at the bottom: leave it free.
    window.setGeometry(0, 0, 1600, 1000 - 60)
    window.launcher.agents.setValue(8)
    window.launcher.start()

    def answer_close() -> None:
        dialog = QtWidgets.QApplication.activeModalWidget()
        if not isinstance(dialog, CloseDialog):
            QtCore.QTimer.singleShot(100, answer_close)
            return
        QtCore.QTimer.singleShot(800, lambda: (grab(env, out / "screenshot-close-dialog.png"),
                                               dialog.cancel_button.click()))

    def open_tray_menu() -> None:
        centre = life.tray.icon.geometry().center()
        subprocess.run(["xdotool", "mousemove", str(centre.x()), str(centre.y()), "click", "3"], env=env, check=True)
        QtCore.QTimer.singleShot(1000, lambda: (grab(env, out / "screenshot-tray-menu.png", MENU_CROP),
                                                life.tray.menu.hide(), window.quit_now(), app.quit()))

    QtCore.QTimer.singleShot(SWARM_S * 1000, lambda: (answer_close(), window.close()))
    QtCore.QTimer.singleShot((SWARM_S + 4) * 1000, open_tray_menu)
    app.exec()
    life.close()
    service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    args = parser.parse_args()
    if missing():
        print(f"needs {missing()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder, desktop(Path(folder)) as env:
        os.environ.update(env)
        shoot(env, args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
