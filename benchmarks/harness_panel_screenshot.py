"""Draws assets/screenshot-agents.png: real coding-agent harnesses launched from the panel's Coding agents
tab, served as named agents, with their turns.

Opens the main window offscreen on the engine the flags name (the bundled model by default), starts the
endpoint, launches one agent of each kind given (all installed ones by default) in a fresh folder holding
hello.py, waits until every one has exited (or --timeout), and grabs the window with the tab shown.

    python benchmarks/harness_panel_screenshot.py [PATH] [--kinds codex aider ...] [--timeout 1200]
        [--engine modeled] [--max-output-tokens 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6 import QtWidgets  # noqa: E402

from swarm_panel.app.harness.kinds import KINDS  # noqa: E402
from swarm_panel.app.server.http_server import HttpServer  # noqa: E402
from swarm_panel.app.service.engine_service import SwarmService  # noqa: E402
from swarm_panel.app.settings.schema import Settings  # noqa: E402
from swarm_panel.ui.shell.main_window import MainWindow  # noqa: E402
from swarm_panel.ui.toolkit import theme  # noqa: E402
from swarm_panel.ui.toolkit.settings_store import SettingsStore  # noqa: E402


async def capture(args: argparse.Namespace, folder: Path) -> int:
    # Every agent's first turn at once: the context holds them all side by side (unified when it widens).
    held = sum(KINDS[kind].context_tokens + args.max_output_tokens for kind in args.kinds)
    settings = Settings(port=0, engine=args.engine, default_max_tokens=args.max_output_tokens,
                        n_ctx=max(Settings.model_fields["n_ctx"].default, -(-held // 4096) * 4096))
    service = SwarmService(settings, leave_a_core=True)
    window = MainWindow(service, SettingsStore(Path(folder).parent / f"{Path(folder).name}-panel.json"))
    window.resize(1760, 1000)
    window.show()
    loaded = asyncio.get_running_loop().create_future()
    window.engine_loaded.connect(lambda error: loaded.done() or loaded.set_result(error))
    window.start_engine()
    http = HttpServer(service)
    await http.start()
    window.set_endpoint(http.url)
    window.attach_endpoint(http)
    try:
        error = await loaded
        if error is not None:
            print(f"the engine did not load: {error}", file=sys.stderr)
            return 1
        panel = window.harness
        window.docks["coding"].raise_()
        panel.folder.setText(str(folder))
        panel.max_output.setValue(args.max_output_tokens)
        for kind in args.kinds:
            panel.kind.setCurrentIndex(panel.kind.findData(kind))
            if not panel.start():
                print(f"{kind}: {panel.message.text()}", file=sys.stderr)
            while len(panel.launcher.runs) < 1 + args.kinds.index(kind):
                await asyncio.sleep(0.1)
        deadline = time.monotonic() + args.timeout
        while not all(run.finished for run in panel.launcher.runs) and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        window.refresh()
        panel.refresh()
        window.grab().save(args.path)
        for run in panel.launcher.runs:
            turns = panel.launcher.turns(run.name)
            print(f"{run.name:<14} {run.status:<8} exit {run.exit_code}  turns {len(turns)}  computed "
                  f"{[t.computed_tokens for t in turns]}")
        print(f"wrote {args.path}")
        return 0
    finally:
        await panel.launcher.stop_all()
        window.close()
        await http.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default="assets/screenshot-agents.png")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS),
                        default=[key for key, kind in KINDS.items() if kind.found()])
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for every agent to exit")
    parser.add_argument("--engine", default="llama", choices=["llama", "modeled"])
    parser.add_argument("--max-output-tokens", type=int, default=1024)
    args = parser.parse_args()
    import qasync

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv)
    app.setStyleSheet(theme.STYLESHEET)
    app.setQuitOnLastWindowClosed(False)  # the loop ends when capture() returns, after the window closes
    theme.configure_pyqtgraph()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory(prefix="agents-screenshot-") as folder:
        (Path(folder) / "hello.py").write_text('print("hello, world")\n')
        with loop:
            return loop.run_until_complete(capture(args, Path(folder)))


if __name__ == "__main__":
    sys.exit(main())
