"""The fleet panel: one line per backend plus the fleet total, gaps for a backend that is down, and
"not reported" where a backend exports no KV figure. Fed from recorded telemetry, no network."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from swarm_panel.app.gateway.backend_metrics import parse_metrics
from swarm_panel.app.gateway.backend_poller import Backend
from swarm_panel.app.settings.backends import BackendConfig
from tests.app.gateway.test_gateway_metrics import LLAMA_SERVER, VLLM_0_10


@pytest.fixture
def backends():
    vllm = Backend(BackendConfig(url="http://gpu-a:8000", kind="vllm", slots=16, name="vllm-a"))
    llama = Backend(BackendConfig(url="http://gpu-b:8080", name="llama-b"))
    llama.props_slots = 4
    return vllm, llama


def test_each_backend_and_the_fleet_get_a_line(qtbot, backends, tmp_path):
    from swarm_panel.ui.fleet.fleet_panel import FleetPanel
    from swarm_panel.ui.toolkit import theme

    theme.configure_pyqtgraph()
    vllm, llama = backends
    panel = FleetPanel([vllm, llama], set_policy=lambda name: None)
    qtbot.addWidget(panel)
    now = time.monotonic()
    vllm.note_sample(parse_metrics(VLLM_0_10), now)
    llama.note_sample(parse_metrics(LLAMA_SERVER), now)
    panel.refresh()
    assert panel.series("occupancy", "vllm-a")[-1] == pytest.approx(100 * 7 / 16)
    assert panel.series("occupancy", "llama-b")[-1] == pytest.approx(100.0)
    assert panel.series("occupancy", "fleet")[-1] == pytest.approx(100 * 11 / 20)
    assert panel.series("waiting", "fleet")[-1] == 3.0
    assert panel.series("kv", "vllm-a")[-1] == pytest.approx(25.0)
    assert math.isnan(panel.series("kv", "llama-b")[-1])
    assert panel.series("kv", "fleet")[-1] == pytest.approx(25.0)  # the mean of those that report one
    assert panel.notes["kv"].toPlainText() == "llama-b: not reported"

    llama.mark_down("connection refused", time.monotonic())
    panel.refresh()
    assert np.isnan(panel.series("occupancy", "llama-b")[-1])
    assert panel.series("occupancy", "fleet")[-1] == pytest.approx(100 * 7 / 16)
    assert "down: connection refused" in panel.status.text()
    panel.resize(1100, 800)
    assert panel.grab().save(str(tmp_path / "fleet.png"))
