"""Garbage collection runs on the GUI thread's timer while a Qt loop runs, never on an engine thread."""

from __future__ import annotations

import gc

from swarm_panel.ui.toolkit.gui_gc import collect_on_gui_thread


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_automatic_collection_is_off_inside_and_back_on_after(qapp, qtbot):
    with collect_on_gui_thread():
        assert not gc.isenabled()
        # A cycle made here is collected by the timer on this (the GUI) thread.
        gc.collect()
        before = len(gc.get_objects())
        for _ in range(2000):
            _Cycle()
        qtbot.wait(1300)
        assert len(gc.get_objects()) < before + 2000
        assert not gc.isenabled()
    assert gc.isenabled()
