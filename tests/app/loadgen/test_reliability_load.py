"""The short chaos run: 64 agents, hang-ups, malformed requests and policy flips, then a clean drain."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.app.loadgen.chaos import ChaosConfig, run_chaos
from tests.app.server.test_server_common import idle, modeled_service, running, wait_until

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def test_64_hostile_agents_keep_every_promise():
    service = modeled_service(num_lanes=64, max_waiting=1024)
    with running(service) as srv:
        report = asyncio.run(run_chaos(ChaosConfig(url=srv.url, agents=64, seconds=12.0, seed=5)))
        assert report.problems == []
        assert report.server_errors == 0 and report.transport_errors == 0
        assert report.completed > 100 and report.wrong_length == 0
        assert report.malformed > 10 and report.malformed_refused == report.malformed
        # The client, the server and the engine share one process (and the GIL), so PUTs queue behind streams.
        assert report.hangups > 10 and report.switches >= 5
        wait_until(lambda: idle(service), timeout=15, what="the engine to drain")
        assert service.engine_thread.num_running == 0
        metrics = httpx.get(f"{srv.url}/metrics").text
        samples = {s.name: s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
        assert samples["swarm_panel:num_requests_running"] == 0
        assert samples["swarm_panel:num_requests_waiting"] == 0
        assert samples["swarm_panel:kv_cache_usage_perc"] == 0
