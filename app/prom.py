"""GET /metrics: Prometheus text under vLLM's names (with `swarm_panel:` for `vllm:`) plus the scheduler's own.

Nothing here runs per step. Gauges are read from the service when Prometheus scrapes; counters and
latency histograms are fed per request by the HTTP layer (on the engine thread, one list increment
per token), and exported by the same custom collector. Every app gets its own CollectorRegistry,
so two servers in one process never share figures.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from runtime.agent_service import AgentTotals
from runtime.config import POLICY_NAMES

if TYPE_CHECKING:
    from app.service import SwarmService

PREFIX = "swarm_panel:"
# Agents named in per-agent series; the rest are summed under OTHER_AGENTS.
TOP_AGENTS = 16
OTHER_AGENTS = "other"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's buckets.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """A fixed-bucket histogram with one writer (the engine thread) and lock-free reads at scrape time."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, documentation: str, labels: dict[str, str]) -> HistogramMetricFamily:
        counts, total = list(self.counts), self.sum
        cumulative, running = [], 0
        for bound, count in zip((*map(_bound_text, self.bounds), "+Inf"), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        family = HistogramMetricFamily(name, documentation, labels=list(labels))
        family.add_metric(list(labels.values()), cumulative, total)
        return family


def _bound_text(bound: float) -> str:
    return repr(float(bound))


class ServerMetrics:
    """Per-request figures the HTTP layer observes; see app.streaming.RequestObserver."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished_by_reason: Counter[str] = Counter()
        self.rejected = 0

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def token_gap(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def finished(self, prompt_tokens: int, completion_tokens: int, reason: str | None, seconds: float) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += completion_tokens
            self.finished_by_reason[reason or "unknown"] += 1
        if reason in ("stop", "length"):
            self.e2e.observe(seconds)

    def reject(self) -> None:
        with self._lock:
            self.rejected += 1


class SwarmCollector(Collector):
    def __init__(self, service: SwarmService, server_metrics: ServerMetrics) -> None:
        self.service = service
        self.server = server_metrics

    def collect(self) -> Iterable[Metric]:
        service, server = self.service, self.server
        model = _model_name(service)
        labels = {"model_name": model}
        names = list(labels)
        values = list(labels.values())

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(PREFIX + name, doc, labels=names)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(PREFIX + name, doc, labels=names)
            family.add_metric(values, value)
            return family

        thread = _thread_of(service)
        snap = service.metrics.snapshot()
        running = thread.num_running if thread is not None else 0
        waiting = thread.num_waiting if thread is not None else 0
        config = thread.config if thread is not None else service.settings.scheduler_config()

        yield gauge("num_requests_running", "Requests in lanes (prefilling or decoding)", running)
        yield gauge("num_requests_waiting", "Requests queued for a lane", waiting)
        yield gauge("kv_cache_usage_perc", "KV cache usage (1 = full), at the last step",
                    snap.kv_used / snap.kv_capacity if snap.kv_capacity else 0.0)
        yield gauge("kv_cache_used_tokens", "KV tokens held at the last step", snap.kv_used)
        yield gauge("kv_cache_capacity_tokens", "KV tokens the scheduler may use", snap.kv_capacity)
        yield gauge("kv_cache_cached_tokens", "Idle KV kept for prefix reuse (not counted as used)", snap.kv_cached)
        yield gauge("kv_cache_cached_sequences", "Finished sequences kept for prefix reuse", snap.cached_sequences)
        yield gauge("recurrent_checkpoints", "Recurrent-state checkpoints a hybrid model keeps for prefix reuse",
                    snap.checkpoints)
        yield gauge("recurrent_checkpoint_bytes", "Memory those checkpoints hold, outside the KV cache",
                    snap.checkpoint_bytes)
        yield counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache", snap.prefix_cache_queries)
        yield counter("prefix_cache_hits", "Prompt tokens served from the prefix cache", snap.prefix_cache_hits)
        yield counter("prompt_tokens", "Prompt tokens of finished HTTP requests", server.prompt_tokens)
        yield counter("generation_tokens", "Tokens generated for HTTP requests", server.generation_tokens)
        success = CounterMetricFamily(PREFIX + "request_success", "Finished HTTP requests by finish reason",
                                      labels=[*names, "finished_reason"])
        for reason, count in sorted(server.finished_by_reason.items()):
            success.add_metric([*values, reason], count)
        yield success
        yield counter("request_rejected", "Requests refused before queueing (overload or invalid)", server.rejected)
        yield server.ttft.family(PREFIX + "time_to_first_token_seconds", "Time to first token", labels)
        yield server.itl.family(PREFIX + "inter_token_latency_seconds", "Time between output tokens", labels)
        yield server.e2e.family(PREFIX + "e2e_request_latency_seconds", "Request latency, submit to last token",
                                labels)

        yield gauge("batch_width", "Lanes the last step held (live plus padding)", snap.width_held)
        yield gauge("live_lanes", "Lanes holding a running request at the last step", snap.live_lanes)
        yield gauge("padding_lanes", "Finished lanes a static batch still computed at the last step",
                    snap.padding_lanes)
        yield counter("padding_rows", "Rows computed for finished sequences (naive static padding)",
                      snap.total_padding_rows)
        yield gauge("utilization", "Useful rows over rows held, over the last few seconds", snap.utilization)
        yield gauge("occupancy", "Live lanes over max_batch, over the last few seconds", snap.occupancy)
        yield gauge("generation_tokens_per_second", "Output tokens per second, over the last few seconds",
                    snap.tok_s)
        yield gauge("mean_step_seconds", "Mean step duration, over the last few seconds", snap.mean_step_ms / 1e3)
        yield counter("steps", "Engine steps since the engine was loaded", snap.steps)
        yield gauge("max_batch", "Most lanes the scheduler may fill", config.max_batch)
        yield gauge("prefill_chunk", "Prompt tokens a step may carry beside its decodes", config.prefill_chunk)
        policy = GaugeMetricFamily(PREFIX + "scheduler_policy", "The batching policy in force (1) and the others (0)",
                                   labels=[*names, "policy"])
        for name in POLICY_NAMES:
            policy.add_metric([*values, name], 1.0 if name == config.policy else 0.0)
        yield policy
        agents = service.inflight.snapshot()
        yield gauge("agents_connected", "Agents with an open HTTP request", len(agents))
        per_agent = GaugeMetricFamily(PREFIX + "agent_open_requests", "Open HTTP requests per agent",
                                      labels=[*names, "agent"])
        for agent, count in sorted(agents.items()):
            per_agent.add_metric([*values, agent], count)
        yield per_agent
        yield gauge("engine_up", "1 while the engine thread runs", 1.0 if thread is not None and thread.alive else 0.0)
        if thread is not None:
            yield from _agent_service(thread.scheduler.service.snapshot(), names, values)


def _agent_service(totals: list[AgentTotals], names: list[str], values: list[str]) -> Iterable[Metric]:
    """Per-agent service counters: the TOP_AGENTS most served by name, the rest summed as "other".

    Agent names come from clients, so their number is unbounded; a fixed cut keeps the label set small.
    A counter may move between a name and "other" as agents overtake each other; sums stay right.
    """
    ranked = sorted(totals, key=lambda t: t.attained, reverse=True)
    shown, rest = ranked[:TOP_AGENTS], ranked[TOP_AGENTS:]
    rows = [(t.agent, t.prompt_tokens, t.output_tokens, t.attained) for t in shown]
    if rest:
        rows.append((OTHER_AGENTS, sum(t.prompt_tokens for t in rest), sum(t.output_tokens for t in rest),
                     sum(t.attained for t in rest)))
    families = (
        ("agent_prompt_tokens_computed", "Prompt tokens computed for each agent (not served from cache)", 1),
        ("agent_generation_tokens", "Output tokens generated for each agent", 2),
        ("agent_service_tokens", "Weighted service per agent (prompt 1, output 2), as fair share and LAS count it", 3),
    )
    for name, doc, column in families:
        family = CounterMetricFamily(PREFIX + name, doc, labels=[*names, "agent"])
        for row in rows:
            family.add_metric([*values, row[0]], row[column])
        yield family


def _thread_of(service: SwarmService):
    try:
        return service.engine_thread
    except RuntimeError:  # nothing loaded (or being reloaded) right now
        return None


def _model_name(service: SwarmService) -> str:
    try:
        facts = service.describe()
    except Exception:  # noqa: BLE001 - a scrape must not fail on a half-loaded engine
        return ""
    return str(facts.get("name") or facts.get("engine") or "")


def build_registry(service: SwarmService, server_metrics: ServerMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SwarmCollector(service, server_metrics))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
