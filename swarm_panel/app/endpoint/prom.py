"""GET /metrics: Prometheus text under vLLM's names (with `swarm_panel:` for `vllm:`) plus the scheduler's own.

Nothing here runs per token. Gauges are read from the service when Prometheus scrapes. The latency
histograms are the engine's own figures: the step records the panel's percentiles come from, on the
engine thread's clock, queued one reference per step and folded into prometheus_client histograms
at scrape time. Finished-request counters are fed on the event loop as HTTP requests end. Every app
gets its own CollectorRegistry, so two servers in one process never share figures.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from swarm_panel.runtime.core.engine import EngineFacts, EngineFigures
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.llama.facts import LlamaFigures
from swarm_panel.runtime.policies.policy import AgentTotals
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.runtime.serving.metrics import PART_LABELS, PARTS, StepTotals

if TYPE_CHECKING:
    from swarm_panel.app.service.engine_service import SwarmService


class StoredResponses(Protocol):
    """What /metrics reads of the Responses API's store (responses_api.store.ResponseStore)."""

    bytes: int

    def __len__(self) -> int: ...

PREFIX = "swarm_panel:"
# Agents named in per-agent series; the rest are summed under OTHER_AGENTS.
TOP_AGENTS = 16
OTHER_AGENTS = "other"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Step records waiting for a scrape beyond this are folded on the engine thread, so memory stays bounded.
FOLD_AFTER_STEPS = 1024

# vLLM's buckets.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class ServerMetrics:
    """The latency histograms (fed by `observe_step`) and the HTTP layer's request counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Not registered anywhere: the collector adds the model_name label when it exports them.
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token",
                              buckets=TTFT_BUCKETS, registry=None)
        self.itl = Histogram(PREFIX + "inter_token_latency_seconds", "Time between output tokens",
                             buckets=ITL_BUCKETS, registry=None)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "Request latency, submit to last token",
                             buckets=E2E_BUCKETS, registry=None)
        self._steps: deque[StepStats] = deque()
        self._fold_lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished_by_reason: Counter[str] = Counter()
        self.rejected = 0

    def observe_step(self, stats: StepStats) -> None:
        """A step record (engine thread, via MetricsAggregator.subscribe): one append, folded later."""
        if not (stats.ttft or stats.itl or stats.e2e):
            return
        self._steps.append(stats)
        if len(self._steps) > FOLD_AFTER_STEPS and self._fold_lock.acquire(blocking=False):
            try:
                self._fold()
            finally:
                self._fold_lock.release()

    def latency_families(self, labels: dict[str, str]) -> Iterable[Metric]:
        with self._fold_lock:
            self._fold()
        for histogram in (self.ttft, self.itl, self.e2e):
            yield from _labelled(histogram, labels)

    def finished(self, prompt_tokens: int, completion_tokens: int, reason: str | None) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += completion_tokens
            self.finished_by_reason[reason or "unknown"] += 1

    def reject(self) -> None:
        with self._lock:
            self.rejected += 1

    def _fold(self) -> None:
        steps = self._steps
        while steps:
            stats = steps.popleft()
            for histogram, samples in ((self.ttft, stats.ttft), (self.itl, stats.itl), (self.e2e, stats.e2e)):
                for _, seconds in samples:
                    histogram.observe(seconds)


def _labelled(histogram: Histogram, labels: dict[str, str]) -> Iterable[Metric]:
    for family in histogram.collect():
        labelled = Metric(family.name, family.documentation, family.type, family.unit)
        labelled.samples = [sample._replace(labels={**labels, **sample.labels}) for sample in family.samples]
        yield labelled


class SwarmCollector(Collector):
    def __init__(self, service: SwarmService, server_metrics: ServerMetrics,
                 responses: StoredResponses | None = None) -> None:
        self.service = service
        self.server = server_metrics
        self.responses = responses

    def collect(self) -> Iterable[Metric]:
        service, server = self.service, self.server
        facts, figures = _read_engine(service)
        model = facts.name if facts is not None else ""
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
        yield gauge("parked_sequences", "Finished sequences parked in host RAM instead of KV cells",
                    snap.parked_sequences)
        yield gauge("parked_sequence_bytes", "Host memory those parked sequences hold", snap.parked_bytes)
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
        yield from server.latency_families(labels)

        yield gauge("batch_width", "Lanes the last step held (live plus padding)", snap.width_held)
        yield gauge("live_lanes", "Lanes holding a running request at the last step", snap.live_lanes)
        yield gauge("padding_lanes", "Finished lanes a static batch still computed at the last step",
                    snap.padding_lanes)
        yield counter("padding_rows", "Rows computed for finished sequences (naive static padding)",
                      snap.total_padding_rows)
        yield gauge("utilization", "Useful rows over rows held, over the last few seconds", snap.utilization)
        yield gauge("occupancy", "Live lanes over num_lanes, over the last few seconds", snap.occupancy)
        yield gauge("generation_tokens_per_second", "Output tokens per second, over the last few seconds",
                    snap.tok_s)
        yield gauge("mean_step_seconds", "Mean step duration, over the last few seconds", snap.mean_step_ms / 1e3)
        yield counter("steps", "Engine steps since the engine was loaded", snap.steps)
        if isinstance(figures, LlamaFigures) and figures.n_threads:
            yield gauge("cpu_threads", "llama.cpp's CPU threads now", figures.n_threads)
        if isinstance(figures, LlamaFigures) and figures.other_processes_cpu_cores is not None:
            yield gauge("other_processes_cpu_cores", "Cores other processes used on this engine's CPUs, "
                        "which its threads leave them", figures.other_processes_cpu_cores)
        yield gauge("num_lanes", "Most lanes the scheduler may fill", config.num_lanes)
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
        if self.responses is not None:
            yield gauge("stored_responses", "Responses API responses kept for previous_response_id",
                        len(self.responses))
            yield gauge("stored_response_bytes", "Memory those stored responses hold, as serialised",
                        self.responses.bytes)
        yield gauge("engine_up", "1 while the engine thread runs", 1.0 if thread is not None and thread.alive else 0.0)
        if thread is not None:
            yield from _step_account(thread.step_times(), names, values)
            yield from _agent_service(thread.scheduler.service.snapshot(), names, values)


def _step_account(totals: StepTotals, names: list[str], values: list[str]) -> Iterable[Metric]:
    """Where the engine thread's time went since it started (runtime.serving.metrics.StepAccount), part by part."""
    seconds = CounterMetricFamily(PREFIX + "engine_thread_seconds", "The engine thread's wall time by part: "
                                  + "; ".join(f"{p}: {PART_LABELS[p]}" for p in PARTS), labels=[*names, "part"])
    for part in PARTS:
        seconds.add_metric([*values, part], getattr(totals, part))
    yield seconds
    logits = CounterMetricFamily(PREFIX + "logits_copied_bytes", "Logits the device copied to the host for "
                                 "sampling there (rows sampled on the backend copy none)", labels=names)
    logits.add_metric(values, totals.logits_bytes)
    yield logits
    share = GaugeMetricFamily(PREFIX + "device_busy_share", "Share of the engine thread's time the device "
                              "computed, since the engine started (idle included)", labels=names)
    share.add_metric(values, totals.device_busy_share)
    yield share


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


def _read_engine(service: SwarmService) -> tuple[EngineFacts | None, EngineFigures | None]:
    try:
        engine = service.engine
        return engine.facts, engine.figures()
    except Exception:  # noqa: BLE001 - a scrape must not fail on a half-loaded (or unloaded) engine
        return None, None


def build_registry(service: SwarmService, server_metrics: ServerMetrics,
                   responses: StoredResponses | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SwarmCollector(service, server_metrics, responses))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
