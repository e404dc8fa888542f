"""Many agents at once over HTTP, live scheduler switches while they run, and /metrics read by Prometheus' parser."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_panel.runtime.workloads.workload import agent_name
from tests.app.server.test_server_common import idle, modeled_service, panel, running, wait_until

# A server or the real model of its own, or seconds of work: CI's full run (pyproject's slow marker).
pytestmark = pytest.mark.slow


def lengths(agent: int, turn: int) -> int:
    return 20 + (agent * 7 + turn * 13) % 64


async def swarm(url: str, agents: int, turns: int, on_turn=None) -> dict[tuple[int, int], int]:
    """Closed-loop agents with the official async client; half stream, half do not. Returns tokens per turn."""
    got: dict[tuple[int, int], int] = {}
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120) as client:

        async def agent(a: int) -> None:
            for turn in range(turns):
                messages = [{"role": "user", "content": f"agent {a} turn {turn}: refactor the parser"}]
                n = lengths(a, turn)
                if (a + turn) % 2:
                    stream = await client.chat.completions.create(
                        model="m", messages=messages, max_tokens=n, stream=True, user=agent_name(a),
                        stream_options={"include_usage": True})
                    text, usage = "", None
                    async for chunk in stream:
                        if chunk.choices:
                            text += chunk.choices[0].delta.content or ""
                        usage = chunk.usage or usage
                    assert len(text.split()) == usage.completion_tokens
                    got[a, turn] = usage.completion_tokens
                else:
                    result = await client.chat.completions.create(model="m", messages=messages, max_tokens=n,
                                                                  user=agent_name(a))
                    assert result.choices[0].finish_reason == "length"
                    got[a, turn] = result.usage.completion_tokens
                if on_turn is not None:
                    await on_turn(a, turn)

        await asyncio.gather(*(agent(a) for a in range(agents)))
    return got


def test_64_concurrent_agents_all_complete_with_exact_tokens():
    service = modeled_service(num_lanes=64, max_waiting=256)
    with running(service) as srv:
        got = asyncio.run(swarm(srv.url, agents=64, turns=2))
        assert got == {(a, t): lengths(a, t) for a in range(64) for t in range(2)}
        snap = service.metrics.snapshot()
        assert snap.total_tokens == sum(got.values())
        assert {f.agent for f in snap.agents} == {agent_name(a) for a in range(64)}
        wait_until(lambda: idle(service), what="an idle engine")
        assert service.inflight.snapshot() == {}


def test_live_scheduler_switch_while_requests_run_loses_nothing():
    service = modeled_service(num_lanes=8)
    switches = [{"policy": "naive", "num_lanes": 4}, {"policy": "shrinking", "prefill_chunk": 64},
                {"policy": "continuous", "num_lanes": 12, "kv_budget": 200_000}]
    seen: list[dict] = []

    with running(service) as srv:
        url = f"{srv.url}/v1/scheduler"

        async def on_turn(agent: int, turn: int) -> None:
            if agent == 0 and turn < len(switches):
                async with httpx.AsyncClient() as http:
                    resp = await http.put(url, json=switches[turn], headers=panel(srv))
                    assert resp.status_code == 200, resp.text
                    seen.append(resp.json())

        got = asyncio.run(swarm(srv.url, agents=12, turns=4, on_turn=on_turn))
        assert got == {(a, t): lengths(a, t) for a in range(12) for t in range(4)}
        assert [s["policy"] for s in seen] == ["naive", "shrinking", "continuous"]
        state = httpx.get(url).json()
        assert (state["policy"], state["num_lanes"], state["prefill_chunk"], state["kv_budget"]) == (
            "continuous", 12, 64, 200_000)
        assert state["policies"] == ["naive", "shrinking", "continuous"]
        assert {"index", "state", "agent", "request_id", "prompt_tokens", "computed_tokens",
                "output_tokens"} <= set(state["lanes"][0])
        wait_until(lambda: idle(service), what="an idle engine")
        assert service.metrics.snapshot().total_tokens == sum(got.values())


def test_scheduler_get_shows_every_lane_while_requests_run():
    service = modeled_service(num_lanes=4)
    with running(service) as srv:
        body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 20_000, "stream": True}
        with httpx.Client(timeout=30) as c, c.stream("POST", f"{srv.url}/v1/chat/completions", json=body,
                                                      headers={"X-Agent-Name": "looker"}) as resp:
            lines = resp.iter_lines()
            next(lines)
            wait_until(lambda: service.engine_thread.lanes()[0].state == "decode", what="a decoding lane")
            state = c.get(f"{srv.url}/v1/scheduler").json()
            assert len(state["lanes"]) == 4 and state["running"] == 1 and state["waiting"] == 0
            busy = [lane for lane in state["lanes"] if lane["state"] != "idle"]
            assert len(busy) == 1 and busy[0]["agent"] == "looker" and busy[0]["output_tokens"] > 0
            assert busy[0]["prompt_tokens"] > 0 and busy[0]["computed_tokens"] >= busy[0]["prompt_tokens"]


def metric_samples(text: str) -> dict[str, list]:
    """Samples by sample name (a histogram's family holds _bucket, _count and _sum samples)."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_metrics_are_prometheus_text_with_vllm_names_and_ours():
    service = modeled_service(num_lanes=4)
    with running(service) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        for n in (5, 7, 9):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=n)
        httpx.put(f"{srv.url}/v1/scheduler", headers=panel(srv), json={"policy": "shrinking"})
        resp = httpx.get(f"{srv.url}/metrics")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        families = metric_samples(resp.text)

    def value(name: str, **labels) -> float:
        matches = [s.value for s in families[name] if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(matches) == 1, (name, labels, families[name])
        return matches[0]

    p = "swarm_panel:"
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "batch_width",
                 "padding_lanes", "utilization", "occupancy", "num_lanes"):
        assert p + name in families, name
    assert value(p + "generation_tokens_total") == 21
    assert value(p + "prompt_tokens_total") > 0
    assert value(p + "request_success_total", finished_reason="length") == 3
    assert value(p + "time_to_first_token_seconds_count") == 3
    assert value(p + "inter_token_latency_seconds_count") == 21 - 3
    assert value(p + "e2e_request_latency_seconds_count") == 3
    assert value(p + "e2e_request_latency_seconds_bucket", le="+Inf") == 3
    assert value(p + "scheduler_policy", policy="shrinking") == 1
    assert value(p + "scheduler_policy", policy="continuous") == 0
    assert 0 <= value(p + "kv_cache_usage_perc") <= 1
    assert 0 < value(p + "utilization") <= 1
    assert value(p + "num_requests_running") == 0
    assert p + "padding_rows_total" in families and p + "steps_total" in families
    # The step account: every part present, the modeled card's compute among them.
    parts = {part: value(p + "engine_thread_seconds_total", part=part)
             for part in ("device", "sampling", "host", "gil_wait", "idle")}
    assert parts["device"] > 0 and all(v >= 0 for v in parts.values())
    assert 0 < value(p + "device_busy_share") <= 1
    assert value(p + "logits_copied_bytes_total") == 0
