"""`swarm-panel gateway --panel`: the gateway on a qasync loop with the fleet plots in a window.

Closing the window stops the gateway (the port is released) before the function returns.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from swarm_panel.app.settings.schema import Settings

log = logging.getLogger(__name__)


def run_fleet_window(settings: Settings, screenshot: Path | None = None, quit_after: float | None = None) -> int:
    import qasync
    from PySide6 import QtWidgets

    from swarm_panel.ui.toolkit import theme
    from swarm_panel.ui.toolkit.gui_gc import collect_on_gui_thread

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("swarm-panel")
    app.setStyle("Fusion")
    app.setQuitOnLastWindowClosed(False)  # the coroutine ends the loop, after stopping the gateway
    theme.configure_pyqtgraph()
    app.setStyleSheet(theme.STYLESHEET)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    try:
        with loop, collect_on_gui_thread():
            return loop.run_until_complete(_main(settings, screenshot, quit_after))
    finally:
        asyncio.set_event_loop(None)


async def _main(settings: Settings, screenshot: Path | None, quit_after: float | None) -> int:
    from PySide6 import QtWidgets

    from swarm_panel.app.gateway.http_server import GatewayServer
    from swarm_panel.ui.fleet.fleet_panel import FleetPanel

    server = GatewayServer(settings)
    await server.start()
    gateway = server.gateway
    window = QtWidgets.QMainWindow()
    window.setWindowTitle(f"swarm-panel gateway on {server.url}/v1")
    panel = FleetPanel(gateway.backends, gateway.set_policy, gateway.set_routing)
    window.setCentralWidget(panel)
    window.resize(1280, 900)
    window.show()
    print(f"gateway on {server.url}/v1 (close the window to stop)", file=sys.stderr, flush=True)
    closed = asyncio.Event()
    app = QtWidgets.QApplication.instance()
    app.lastWindowClosed.connect(closed.set)
    exit_code = 0
    if quit_after is not None:
        def capture_and_close() -> None:
            nonlocal exit_code
            if screenshot is not None:
                panel.refresh()
                if not window.grab().save(str(screenshot)):
                    log.error("could not write %s", screenshot)
                    exit_code = 1
            window.close()

        asyncio.get_running_loop().call_later(quit_after, capture_and_close)
    try:
        await closed.wait()
    finally:
        panel.timer.stop()
        await server.stop()
    return exit_code
