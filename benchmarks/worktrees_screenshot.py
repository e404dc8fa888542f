"""Draws assets/screenshot-worktrees.png: four agents launched from the panel's Coding agents dock on one git
repository, each in its own worktree inside the fence, editing the same line; in the Review dock below, the
first applied, the second refused with the conflicting files named.

The agents are the tests' scripted stand-in harness (tests/app/workspace/stand_in.py), launched through the
same launcher and fence as the real ones: a 135M model does not edit one line on cue. Offscreen, no engine
(the stand-in sends no request), in a temporary repository and worktree folder.

    python benchmarks/worktrees_screenshot.py [PATH]
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
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the stand-in lives with the tests

from PySide6 import QtWidgets

from swarm_panel.app.harness.launcher import Launcher
from swarm_panel.ui.panels.harness_panel import HarnessPanel
from swarm_panel.ui.toolkit import theme
from tests.app.workspace.git_repo import make_repo
from tests.app.workspace.stand_in import stand_in_kind, task


def settle(app: QtWidgets.QApplication, panel: HarnessPanel) -> None:
    panel.worktrees.wait_idle()
    app.processEvents()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default=str(ROOT / "assets" / "screenshot-worktrees.png"))
    args = parser.parse_args()
    import qasync

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv)
    app.setStyleSheet(theme.STYLESHEET)
    with tempfile.TemporaryDirectory(prefix="worktrees-screenshot-") as scratch:
        folder = Path(scratch)
        os.environ["SWARM_PANEL_WORKTREES"] = str(folder / "worktrees")
        repo = make_repo(folder / "project", {"story.txt": "Once upon a time\nthere was a swarm.\nThe end.\n"})
        kind = stand_in_kind(folder)
        launcher = Launcher(state_dir=folder / "state")
        panel = HarnessPanel(None, lambda: "http://127.0.0.1:9", kinds={kind.key: kind}, launcher=launcher)
        # The Coding agents dock above the Review dock, as two docks stacked in one column.
        shown = QtWidgets.QWidget()
        column = QtWidgets.QVBoxLayout(shown)
        column.addWidget(panel, 1)
        column.addWidget(panel.worktrees, 1)
        shown.resize(1300, 1080)
        shown.show()
        panel.folder.setText(str(repo))
        panel.task.setText(task(write={"story.txt": "Once upon a time\n{name} rewrote this line.\nThe end.\n",
                                       "notes.md": "# what {name} did\n"}))
        panel.count.setValue(4)
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)

        async def launch() -> None:
            panel.start()
            deadline = time.monotonic() + 60
            while not (len(launcher.runs) == 4 and all(r.finished for r in launcher.runs)):
                if time.monotonic() > deadline:
                    raise SystemExit("the stand-ins did not finish")
                await asyncio.sleep(0.1)

        with loop:
            loop.run_until_complete(launch())
        before = (repo / "story.txt").read_text()
        panel.refresh()
        panel.worktrees.poll()
        settle(app, panel)
        panel.worktrees.table.selectRow(0)
        panel.worktrees.apply_selected()
        settle(app, panel)
        first = panel.worktrees.message.text()
        panel.worktrees.table.selectRow(1)
        panel.worktrees.apply_selected()
        settle(app, panel)
        second = panel.worktrees.message.text()
        panel.worktrees.poll()
        settle(app, panel)
        settle(app, panel)  # the selected agent's diff
        shown.grab().save(args.path)
        print(f"user's story.txt before Apply: {before!r}")
        print(f"first Apply: {first}")
        print(f"second Apply: {second}")
        print(f"user's story.txt after: {(repo / 'story.txt').read_text()!r}")
        print(f"wrote {args.path}")
        panel.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
