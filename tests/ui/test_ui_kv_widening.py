"""The panel when the default split KV turns unified under a long prompt, and split again once the long
requests are gone (with the attention kernel the probe chose turning to flash attention while widened):
the engine facts, a marker on the plots and the status line say so, and the window keeps painting."""

from __future__ import annotations

import pytest

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.cpu_tuning.followers import AttentionCurve, AttentionFollower
from tests.runtime.llama.cpu_tuning.test_attention_follower import CURVE
from tests.ui.test_ui_common import no_user_config  # noqa: F401


@pytest.mark.parametrize("probed", [False, True], ids=["kernel-by-setting", "kernel-by-probe"])
def test_the_panel_shows_the_layout_widening_and_narrowing(qtbot, no_user_config, tiny_model_path, tmp_path, probed):
    from swarm_panel.ui.shell.main_window import MainWindow

    service = SwarmService(Settings(engine="llama", model=tiny_model_path, port=0, n_ctx=8192, n_batch=256,
                                    num_lanes=2, threads=2, extra_buffers="off", flash_attn="off"))
    service.start()
    if probed:  # as though the probe had chosen the plain path and timed both kernels' curve
        service.engine.attention_curve = CURVE
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
        assert [m.label for m in win.feed.markers] == ["KV unified, flash attn on" if probed else "KV unified"]
        assert layout.endswith("for a request of 5,005 tokens)")
        assert "turned unified" in win.engine_panel.status.text()
        assert ("share, and flash attention on." in win.engine_panel.status.text()) == probed
        assert win.engine_panel.shown_facts()["flash attention"].startswith("on" if probed else "off")
        win.resize(1400, 900)
        win.grab().save(str(tmp_path / "widened.png"))

        service.engine_thread.relayouts.narrow_after_s = 0.0  # the quiet period has passed
        qtbot.waitUntil(lambda: service.engine.facts.kv_unified is False, timeout=30000)
        win.refresh()
        win._refresh_slow(service.engine_thread)
        layout = win.engine_panel.shown_facts()["KV layout"]
        assert layout.startswith("split KV (4096 tokens a lane; back from unified after 0 s")
        assert [m.label for m in win.feed.markers] == (["KV unified, flash attn on", "KV split, flash attn off"]
                                                       if probed else ["KV unified", "KV split"])
        assert "split again" in win.engine_panel.status.text()
        assert ("for a while, and flash attention off." in win.engine_panel.status.text()) == probed
        assert win.engine_panel.shown_facts()["flash attention"].startswith("off")
        win.grab().save(str(tmp_path / "narrowed.png"))
    finally:
        win.close()
        service.stop()


def test_the_panel_marks_the_kernel_following_the_contexts(qtbot, no_user_config, tiny_model_path):
    """Short contexts where flash attention is far cheaper: the engine switches to it, and the panel's
    marker and status line say so and why."""
    from swarm_panel.ui.shell.main_window import MainWindow

    service = SwarmService(Settings(engine="llama", model=tiny_model_path, port=0, n_ctx=8192, n_batch=256,
                                    num_lanes=2, threads=2, extra_buffers="off", flash_attn="off"))
    service.start()
    short_on = AttentionCurve((100, 1000), on=(0.020, 0.120), off=(0.045, 0.075), prompt_token=(0.003, 0.003))
    service.engine.attention_curve = short_on
    service.engine_thread.relayouts.attention = AttentionFollower(short_on, "off", min_rows=4)
    win = MainWindow(service)
    qtbot.addWidget(win)
    try:
        win.refresh()
        win._refresh_slow(service.engine_thread)
        done: list = []
        for k in range(2):
            prompt = [1] + [100 + (i + k) % 50 for i in range(60)]
            service.engine_thread.submit(Request(prompt, SamplingParams(max_tokens=24, ignore_eos=True),
                                                 listener=lambda o: done.append(o)))
        qtbot.waitUntil(lambda: sum(o.finished for o in done) == 2, timeout=30000)
        assert all(o.error is None for o in done if o.finished)
        win.refresh()
        win._refresh_slow(service.engine_thread)
        assert [m.label for m in win.feed.markers] == ["flash attn on"]
        assert win.engine_panel.shown_facts()["flash attention"] == "on"
        assert "Flash attention turned on (switched for the contexts served lately" in win.engine_panel.status.text()
    finally:
        win.close()
        service.stop()
