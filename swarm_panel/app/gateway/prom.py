"""The gateway's GET /metrics: per backend what its telemetry says and what the gateway sent it, per agent
what is open and queued. Names under `swarm_panel:gateway_`, read at scrape time from the gateway's state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from swarm_panel.app.gateway.admission import Gateway

PREFIX = "swarm_panel:gateway_"


class GatewayCollector(Collector):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterable[Metric]:
        gateway = self.gateway

        def per_backend(family, value_of) -> Metric:
            for b in gateway.backends:
                value = value_of(b)
                if value is not None:
                    family.add_metric([b.label, b.kind], value)
            return family

        labels = ["backend", "kind"]
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_up", "1 while the backend answers its polls",
                                            labels=labels), lambda b: 1.0 if b.up else 0.0)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_inflight", "Requests the gateway has open on it",
                                            labels=labels), lambda b: b.inflight)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_slots", "Concurrent sequences it runs", labels=labels),
                          lambda b: b.slots)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_running", "Running requests, as the backend reports",
                                            labels=labels), lambda b: b.sample.running if b.sample else None)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_waiting", "Queued requests, as the backend reports",
                                            labels=labels), lambda b: b.sample.waiting if b.sample else None)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_kv_cache_usage_perc",
                                            "KV cache usage (1 = full); absent where the backend reports none",
                                            labels=labels),
                          lambda b: b.sample.kv_usage if b.sample else None)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_generation_tokens_per_second",
                                            "Output tokens per second, from the backend's counters", labels=labels),
                          lambda b: b.tok_s)
        yield per_backend(GaugeMetricFamily(PREFIX + "backend_prefix_hit_rate",
                                            "Share of prompt tokens served from its prefix cache, since the last poll",
                                            labels=labels), lambda b: b.hit_rate)
        yield per_backend(CounterMetricFamily(PREFIX + "backend_requests", "Requests forwarded to it", labels=labels),
                          lambda b: b.requests)
        yield per_backend(CounterMetricFamily(PREFIX + "backend_failed_requests",
                                              "Requests it failed mid-way (it was then marked down)", labels=labels),
                          lambda b: b.failed_requests)
        yield per_backend(CounterMetricFamily(PREFIX + "backend_prompt_tokens",
                                              "Prompt tokens its responses reported", labels=labels),
                          lambda b: b.seen_prompt_tokens)
        yield per_backend(CounterMetricFamily(PREFIX + "backend_cached_tokens",
                                              "Of those, served from its prefix cache", labels=labels),
                          lambda b: b.seen_cached_tokens)
        waiting = GaugeMetricFamily(PREFIX + "num_requests_waiting", "Requests queued in the gateway")
        waiting.add_metric([], gateway.num_waiting)
        yield waiting
        moves = CounterMetricFamily(PREFIX + "agent_moves", "Agents routed away from their backend")
        moves.add_metric([], gateway.router.moves)
        yield moves
        policy = GaugeMetricFamily(PREFIX + "policy", "The admission policy in force (1)", labels=["policy", "routing"])
        policy.add_metric([gateway.policy.name, gateway.router.name], 1.0)
        yield policy
        agents = sorted(set(gateway.agent_inflight) | {a for a, q in gateway.queues.items() if q})
        open_requests = GaugeMetricFamily("swarm_panel:agent_open_requests", "Open requests per agent",
                                          labels=["agent", "backend"])
        queued = GaugeMetricFamily(PREFIX + "agent_queued", "Requests per agent waiting in the gateway",
                                   labels=["agent"])
        for agent in agents:
            backend = gateway.agent_backend.get(agent, "")
            open_requests.add_metric([agent, backend], gateway.agent_inflight.get(agent, 0))
            queued.add_metric([agent], len(gateway.queues.get(agent, ())))
        yield open_requests
        yield queued
        total = CounterMetricFamily(PREFIX + "agent_requests", "Requests admitted per agent", labels=["agent"])
        for agent, count in sorted(gateway.agent_requests.items()):
            total.add_metric([agent], count)
        yield total


def build_gateway_registry(gateway: Gateway) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(gateway))
    return registry
