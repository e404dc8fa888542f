"""A start that says what it is doing: the service names each start-up stage, with the weights'
load reported as a fraction that grows to the end, and the log has a line per stage."""

from __future__ import annotations

import logging

from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings
from swarm_panel.runtime.llama.cpu_tuning import door, extra_buffers_probe, flash_attn_probe
from swarm_panel.runtime.llama.cpu_tuning.flash_attn_probe import ProbeLayout


def test_a_start_names_its_stages_and_the_load_fills_up(arch_model_path, monkeypatch, caplog):
    service = SwarmService(Settings(model=str(arch_model_path), n_ctx=1024, num_lanes=2, threads=1,
                                    extra_buffers="off", flash_attn="off"))
    seen: list[tuple[str, float | None]] = []
    record = service._startup_stage
    monkeypatch.setattr(service, "_startup_stage", lambda stage, fraction: seen.append((stage, fraction))
                        or record(stage, fraction))
    with caplog.at_level(logging.INFO, logger="swarm_panel.app.service.engine_service"):
        service.start()
    try:
        stages = list(dict.fromkeys(stage for stage, _ in seen))
        assert stages == [f"loading the weights of {arch_model_path.name}", "starting the engine thread"]
        load = [f for stage, f in seen if stage.startswith("loading")]
        assert load[0] == 0.0 and load[-1] == 1.0 and load == sorted(load)
        assert service.startup is None
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up:")]
        assert logged == [f"start-up: {s}" for s in stages] + [f"start-up: ready ({service.engine.name})"]
    finally:
        service.stop()


def test_the_cpu_probes_are_stages_of_their_own_where_they_run(monkeypatch, tmp_path):
    monkeypatch.setattr(door, "decide_extra_buffers",
                        lambda path, mode: extra_buffers_probe.ExtraBuffersDecision(True, "ok"))
    monkeypatch.setattr(door, "decide_flash_attn", lambda *a, **k: flash_attn_probe.FlashAttnDecision("on", "faster"))
    seen: list[str] = []
    layout = ProbeLayout(4096, 8, False)
    door.engine_tuning(tmp_path / "m.gguf", offloaded=False, extra_buffers="auto", flash_attn="auto", layout=layout,
                       kv_type="f16", n_threads=None, progress=lambda stage, fraction: seen.append(stage))
    assert [s.split(" ")[0] for s in seen] == ["checking", "timing"]
    seen.clear()
    door.engine_tuning(tmp_path / "m.gguf", offloaded=False, extra_buffers="on", flash_attn="off", layout=layout,
                       kv_type="f16", n_threads=None, progress=lambda stage, fraction: seen.append(stage))
    assert seen == []
