"""Python's garbage collector runs on the GUI thread only, on a timer.

Collection runs on whichever thread happens to allocate, here often the engine thread. A Qt object
in a reference cycle (a closed window, a dialog) collected there is destroyed off the GUI thread,
where its destructor deadlocks against the GUI thread's painting or crashes the process. pyqtgraph's
GarbageCollector turns automatic collection off and collects on a GUI-thread timer instead.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0


@contextlib.contextmanager
def collect_on_gui_thread() -> Iterator[None]:
    """While the Qt loop runs; afterwards collection is automatic again (and runs once, here)."""
    collector = GarbageCollector(interval=INTERVAL_S)
    try:
        yield
    finally:
        collector.timer.stop()
        gc.enable()
        gc.collect()
