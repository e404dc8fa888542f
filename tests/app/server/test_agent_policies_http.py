"""The agent-aware policies over HTTP: live switches with per-agent maps, X-Agent-Priority, /metrics, the swarm."""

from __future__ import annotations

import asyncio
import threading

import httpx

from swarm_panel.app.endpoint.prom import OTHER_AGENTS, TOP_AGENTS
from swarm_panel.app.loadgen.swarm import SwarmConfig, run_swarm
from swarm_panel.runtime.workloads.critical_path import COORDINATOR, NOISY, CriticalPathWorkload
from tests.app.server.test_server_common import assert_error, idle, modeled_service, panel, running, wait_until
from tests.app.server.test_server_load import metric_samples


def test_put_scheduler_switches_to_each_agent_policy_with_its_per_agent_maps():
    with running(modeled_service(num_lanes=4)) as srv:
        url, key = f"{srv.url}/v1/scheduler", panel(srv)
        for policy in ("fair", "las", "priority", "continuous"):
            state = httpx.put(url, headers=key, json={"policy": policy, "agent_weights": {"a": 2.0},
                                                      "agent_priorities": {"b": -3}}).json()
            assert (state["policy"], state["agent_weights"], state["agent_priorities"]) == (
                policy, {"a": 2.0}, {"b": -3})
        assert state["agent_policies"] == ["fair", "las", "priority"]
        assert_error(httpx.put(url, headers=key, json={"agent_weights": {"a": 0}}), 400, contains="positive")
        assert_error(httpx.put(url, headers=key, json={"agent_priorities": {"a": "high"}}), 400)


def test_x_agent_priority_header_goes_ahead_of_the_queue_under_the_priority_policy():
    service = modeled_service(num_lanes=1, policy="priority")
    with running(service) as srv:
        done: list[str] = []

        def ask(agent: str, headers: dict, max_tokens: int) -> None:
            body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": max_tokens, "ignore_eos": True,
                    "user": agent}
            resp = httpx.post(f"{srv.url}/v1/chat/completions", json=body, headers=headers, timeout=30)
            assert resp.status_code == 200, resp.text
            done.append(agent)

        blocker = threading.Thread(target=ask, args=("blocker", {}, 400))
        blocker.start()
        wait_until(lambda: service.engine_thread.num_running == 1, what="the blocker in its lane")
        plain = threading.Thread(target=ask, args=("plain", {}, 5))
        plain.start()
        wait_until(lambda: service.engine_thread.num_waiting == 1, what="a queued request")
        urgent = threading.Thread(target=ask, args=("urgent", {"X-Agent-Priority": "-5"}, 5))
        urgent.start()
        for thread in (blocker, plain, urgent):
            thread.join(30)
        assert done == ["blocker", "urgent", "plain"]
        bad = httpx.post(f"{srv.url}/v1/chat/completions", headers={"X-Agent-Priority": "soon"},
                         json={"messages": [{"role": "user", "content": "go"}], "max_tokens": 2})
        assert_error(bad, 400, param="X-Agent-Priority")


def test_metrics_count_service_per_agent_for_the_top_agents_and_sum_the_rest():
    service = modeled_service(num_lanes=8)
    agents = TOP_AGENTS + 4
    with running(service) as srv:
        with httpx.Client(timeout=30) as client:
            for k in range(agents):
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3 + k, "ignore_eos": True,
                        "user": f"agent-{k:02d}"}
                assert client.post(f"{srv.url}/v1/chat/completions", json=body).status_code == 200
        wait_until(lambda: idle(service), what="an idle engine")
        families = metric_samples(httpx.get(f"{srv.url}/metrics").text)
    generated = {s.labels["agent"]: s.value for s in families["swarm_panel:agent_generation_tokens_total"]}
    assert len(generated) == TOP_AGENTS + 1 and OTHER_AGENTS in generated
    assert sum(generated.values()) == sum(3 + k for k in range(agents))
    # The most served agents are the ones named.
    assert generated[f"agent-{agents - 1:02d}"] == 3 + agents - 1 and "agent-00" not in generated


def test_the_critical_path_swarm_over_http_reports_rounds_shares_and_latency():
    workload = CriticalPathWorkload(workers=3, rounds=2, worker_lengths=(4, 8, 16), noisy_lengths=(6, 12),
                                    plan_tokens=5, merge_tokens=7, noisy_concurrency=6, prompt_tokens=8)
    service = modeled_service(num_lanes=4, policy="las")
    with running(service) as srv:
        rounds: list[dict] = []
        config = SwarmConfig(url=srv.url, critical_path=workload)
        report = asyncio.run(run_swarm(config, on_round=rounds.append))
        wait_until(lambda: idle(service), what="an idle engine")
    figures = report.critical_path
    assert report.errors == 0 and len(figures["rounds"]) == 2 and rounds == figures["rounds"]
    assert all(r["makespan"] > 0 and r["jain"] is not None for r in rounds)
    assert figures["latency"][COORDINATOR]["turns"] == 4 and figures["latency"]["worker-03"]["turns"] == 2
    assert 0 < figures["fairness"]["share"][NOISY] < 1
    assert abs(sum(figures["fairness"]["share"].values()) - 1) < 1e-9
