"""What a backend's /metrics (and llama-server's /props) say about its load, in one shape for every kind.

Names read, by kind:
- vLLM: `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (0.9 and
  later; before that `vllm:gpu_cache_usage_perc`), `vllm:generation_tokens_total`,
  `vllm:prompt_tokens_total`, `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`
  (early V1: `vllm:gpu_prefix_cache_*`; V0: the `vllm:gpu_prefix_cache_hit_rate` gauge). A
  data-parallel server labels each engine with `engine="N"`: counts are summed over engines, KV usage
  is their mean (every engine holds an equal pool). vLLM does not export its max sequences.
- llama-server (`--metrics`): `llamacpp:requests_processing`, `llamacpp:requests_deferred`,
  `llamacpp:tokens_predicted_total`, `llamacpp:prompt_tokens_total`, and on newer builds
  `llamacpp:prompt_tokens_cached_total`. No KV usage: reported as None, never made up. Slots come
  from `/props` `total_slots`.
- swarm-panel: the same names as vLLM under `swarm_panel:`, plus `swarm_panel:num_lanes`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PREFIXES = {"vllm:": "vllm", "llamacpp:": "llama-server", "swarm_panel:": "swarm-panel"}


@dataclass(slots=True, frozen=True)
class MetricsSample:
    kind: str
    running: float
    waiting: float
    # Concurrency the backend itself reports (swarm-panel's num_lanes); llama-server's is in /props.
    slots: int | None
    # 0..1; None where the backend exports no KV figure.
    kv_usage: float | None
    generation_tokens: float | None
    prompt_tokens: float | None
    prefix_hits: float | None
    prefix_queries: float | None
    # vLLM V0 exported only a ready-made hit rate.
    prefix_hit_rate: float | None
    # swarm-panel's own windowed rate: its token counter moves only when a request finishes.
    tok_s: float | None
    engines: int


class Values:
    """Sample values summed over label sets, plus the per-engine split vLLM's data parallelism adds."""

    def __init__(self, text: str) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.per_engine: dict[str, dict[str, float]] = defaultdict(dict)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created") or math.isnan(sample.value):
                    continue
                self.total[sample.name] += sample.value
                engine = sample.labels.get("engine")
                if engine is not None:
                    per = self.per_engine[sample.name]
                    per[engine] = per.get(engine, 0.0) + sample.value

    def get(self, *names: str) -> float | None:
        for name in names:
            if name in self.total:
                return self.total[name]
        return None

    def mean_over_engines(self, *names: str) -> float | None:
        for name in names:
            per = self.per_engine.get(name)
            if per:
                return sum(per.values()) / len(per)
            if name in self.total:
                return self.total[name]
        return None

    def engines(self) -> int:
        return max((len(v) for v in self.per_engine.values()), default=1)

    def kind(self) -> str | None:
        for name in self.total:
            for prefix, kind in PREFIXES.items():
                if name.startswith(prefix):
                    return kind
        return None


def parse_metrics(text: str, kind: str = "auto") -> MetricsSample:
    """Raises ValueError when the text is not Prometheus exposition or names no known engine."""
    try:
        values = Values(text)
    except Exception as exc:  # noqa: BLE001 - the parser raises bare ValueError/TypeError/IndexError alike
        raise ValueError(f"not Prometheus text: {exc}") from None
    found = values.kind()
    if kind == "auto":
        if found is None:
            raise ValueError("the /metrics text has no vllm:, llamacpp: or swarm_panel: metrics")
        kind = found
    if kind == "vllm":
        return _vllm(values)
    if kind == "llama-server":
        return _llama_server(values)
    return _swarm_panel(values)


def _vllm(v: Values) -> MetricsSample:
    return MetricsSample(
        kind="vllm",
        running=v.get("vllm:num_requests_running") or 0.0,
        waiting=v.get("vllm:num_requests_waiting") or 0.0,
        slots=None,
        kv_usage=v.mean_over_engines("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        generation_tokens=v.get("vllm:generation_tokens_total"),
        prompt_tokens=v.get("vllm:prompt_tokens_total"),
        prefix_hits=v.get("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries=v.get("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        prefix_hit_rate=v.mean_over_engines("vllm:gpu_prefix_cache_hit_rate"),
        tok_s=None,
        engines=v.engines(),
    )


def _llama_server(v: Values) -> MetricsSample:
    computed = v.get("llamacpp:prompt_tokens_total")
    cached = v.get("llamacpp:prompt_tokens_cached_total")
    return MetricsSample(
        kind="llama-server",
        running=v.get("llamacpp:requests_processing") or 0.0,
        waiting=v.get("llamacpp:requests_deferred") or 0.0,
        slots=None,
        kv_usage=None,
        generation_tokens=v.get("llamacpp:tokens_predicted_total"),
        prompt_tokens=computed,
        # prompt_tokens_total counts only computed tokens, so a query is computed + cached.
        prefix_hits=cached,
        prefix_queries=(computed or 0.0) + cached if cached is not None else None,
        prefix_hit_rate=None,
        tok_s=None,
        engines=1,
    )


def _swarm_panel(v: Values) -> MetricsSample:
    slots = v.get("swarm_panel:num_lanes")
    return MetricsSample(
        kind="swarm-panel",
        running=v.get("swarm_panel:num_requests_running") or 0.0,
        waiting=v.get("swarm_panel:num_requests_waiting") or 0.0,
        slots=int(slots) if slots else None,
        kv_usage=v.get("swarm_panel:kv_cache_usage_perc"),
        generation_tokens=v.get("swarm_panel:generation_tokens_total"),
        prompt_tokens=v.get("swarm_panel:prompt_tokens_total"),
        prefix_hits=v.get("swarm_panel:prefix_cache_hits_total"),
        prefix_queries=v.get("swarm_panel:prefix_cache_queries_total"),
        prefix_hit_rate=None,
        tok_s=v.get("swarm_panel:generation_tokens_per_second"),
        engines=1,
    )


def total_slots(props: Any) -> int | None:
    """llama-server's `/props` `total_slots` (its `--parallel`), or None if the answer has none."""
    if isinstance(props, dict):
        value = props.get("total_slots")
        if isinstance(value, int) and value > 0:
            return value
    return None
