"""The panel when the default split KV turns unified under a long prompt, and split again once the long
requests are gone: the engine facts, a marker on the plots and the status line say so, and the window
keeps painting."""

from __future__ import annotations

from app.service import SwarmService
from app.settings import Settings
from runtime.request import Request, SamplingParams
from tests.test_ui_common import no_user_config  # noqa: F401


def test_the_panel_shows_the_layout_widening_and_narrowing(qtbot, no_user_config, tiny_model_path, tmp_path):
    from ui.main_window import MainWindow

    service = SwarmService(Settings(engine="llama", model=tiny_model_path, port=0, n_ctx=8192, n_batch=256,
                                    max_batch=2, threads=2, extra_buffers="off", flash_attn="off"))
    service.start()
    win = MainWindow(service)
    qtbot.addWidget(win)
    try:
        win.refresh()
        assert win.engine_panel.shown_facts()["KV layout"] == "split KV (4096 tokens a lane)"
        done = []
        prompt = [1] + [100 + i % 50 for i in range(5000)]
        request = Request(prompt, SamplingParams(max_tokens=4, ignore_eos=True), listener=lambda o: done.append(o))
        service.engine_thread.submit(request)
        qtbot.waitUntil(lambda: bool(done) and done[-1].finished, timeout=30000)
        assert done[-1].error is None
        win.refresh()
        win._refresh_slow(service.engine_thread)
        layout = win.engine_panel.shown_facts()["KV layout"]
        assert layout.startswith("unified KV (widened from split")
        assert [m.label for m in win.feed.markers] == ["KV unified"]
        assert layout.endswith("for a request of 5,005 tokens)")
        assert "turned unified" in win.engine_panel.status.text()
        win.resize(1400, 900)
        win.grab().save(str(tmp_path / "widened.png"))

        service.engine_thread.narrow_after_s = 0.0  # the quiet period has passed
        qtbot.waitUntil(lambda: service.describe()["kv_unified"] is False, timeout=30000)
        win.refresh()
        win._refresh_slow(service.engine_thread)
        layout = win.engine_panel.shown_facts()["KV layout"]
        assert layout.startswith("split KV (4096 tokens a lane; back from unified after 0 s")
        assert [m.label for m in win.feed.markers] == ["KV unified", "KV split"]
        assert "split again" in win.engine_panel.status.text()
        win.grab().save(str(tmp_path / "narrowed.png"))
    finally:
        win.close()
        service.stop()
