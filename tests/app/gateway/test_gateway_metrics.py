"""Backend telemetry: recorded /metrics and /props text of vLLM and llama-server, and swarm-panel's own.

Where each recorded sample comes from (the text is written from the exporters' sources: neither
engine runs here; values are made up, names, types, labels and layout are the exporters'):

- VLLM_0_8: vLLM 0.8.x, V0 engine, `vllm/engine/metrics.py` (class Metrics): gauges
  `vllm:num_requests_running|waiting|swapped`, `vllm:gpu_cache_usage_perc`, `vllm:cpu_cache_usage_perc`,
  `vllm:gpu_prefix_cache_hit_rate`; counters `vllm:prompt_tokens`, `vllm:generation_tokens` (exposed
  with `_total`); one label, `model_name`. No `kv_cache_usage_perc` yet: the pre-0.9 name.
- VLLM_0_10: vLLM 0.10, V1 engine, `vllm/v1/metrics/loggers.py` (PrometheusStatLogger): labels
  `model_name` and `engine`; both `vllm:kv_cache_usage_perc` and the deprecated
  `vllm:gpu_cache_usage_perc`; counters `vllm:prefix_cache_queries|hits`, `vllm:prompt_tokens`,
  `vllm:generation_tokens`, each with the `_created` sample prometheus_client adds.
- VLLM_DP2: the same exporter under `--data-parallel-size 2`: `make_per_engine` gives every series one
  child per engine index, `engine="0"` and `engine="1"`.
- LLAMA_SERVER: llama-server `--metrics`, the handler in `tools/server/server.cpp` (llama.cpp builds
  of 2025): counters `llamacpp:prompt_tokens_total`, `prompt_seconds_total`, `tokens_predicted_total`,
  `tokens_predicted_seconds_total`, `n_decode_total`, `n_busy_slots_per_decode` (typed counter with
  no `_total`), gauges `prompt_tokens_seconds`, `predicted_tokens_seconds`, `requests_processing`,
  `requests_deferred`. No KV figure.
- LLAMA_SERVER_CACHED: current llama.cpp, `server_task_result_metrics::to_metrics` in
  `tools/server/server-task.cpp`, which adds `llamacpp:prompt_tokens_cached_total` and counts only
  computed tokens in `prompt_tokens_total`.
- LLAMA_PROPS: `GET /props`, `get_res_props` in `tools/server/server-context.cpp`: `total_slots` is
  `--parallel` (trimmed to the fields around it).
"""

from __future__ import annotations

import math

import pytest

from swarm_panel.app.endpoint.prom import ServerMetrics, build_registry, render
from swarm_panel.app.gateway.backend_metrics import parse_metrics, total_slots
from swarm_panel.app.gateway.backend_poller import Backend
from swarm_panel.app.gateway.request_facts import UsageTap, inspect, prompt_usage
from swarm_panel.app.settings.backends import BackendConfig, parse_backend

M = 'model_name="Qwen/Qwen2.5-7B-Instruct"'

VLLM_0_8 = f"""# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{M}}} 5.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{{{M}}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{M}}} 2.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{M}}} 0.375
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{{{M}}} 0.0
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{{{M}}} 0.62
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{M}}} 48213.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{M}}} 19004.0
"""


def _v1(engines: dict[str, dict[str, float]]) -> str:
    def series(name: str, kind: str, doc: str, key: str) -> str:
        lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        for engine, values in engines.items():
            labels = f'{{engine="{engine}",{M}}}'
            if kind == "counter":
                lines.append(f"{name}_total{labels} {values[key]}")
                lines.append(f"{name}_created{labels} 1.7213e+09")
            else:
                lines.append(f"{name}{labels} {values[key]}")
        return "\n".join(lines)

    return "\n".join([
        series("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "running"),
        series("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "waiting"),
        series("vllm:gpu_cache_usage_perc", "gauge",
               "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
               "kv"),
        series("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "kv"),
        series("vllm:prefix_cache_queries", "counter",
               "Prefix cache queries, in terms of number of queried tokens.", "queries"),
        series("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.", "hits"),
        series("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "prompt"),
        series("vllm:generation_tokens", "counter", "Number of generation tokens processed.", "generation"),
    ]) + "\n"


VLLM_0_10 = _v1({"0": dict(running=7, waiting=0, kv=0.25, queries=10000, hits=6500, prompt=10000, generation=4000)})
VLLM_DP2 = _v1({"0": dict(running=7, waiting=1, kv=0.5, queries=1000, hits=800, prompt=1000, generation=300),
                "1": dict(running=3, waiting=0, kv=0.25, queries=3000, hits=1200, prompt=3000, generation=700)})

LLAMA_SERVER = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 29.03
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 35.44
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 3001
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 3.2
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 237.151
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 97.8
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
"""

LLAMA_SERVER_CACHED = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 2800
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 900
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds nan
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""

LLAMA_PROPS = {
    "default_generation_settings": {"n_ctx": 4096, "params": {"temperature": 0.8}},
    "total_slots": 4,
    "model_alias": "qwen2.5-1.5b-instruct-q4_k_m.gguf",
    "endpoint_slots": True,
    "endpoint_metrics": True,
    "build_info": "b6100-abcdef0",
}


def test_vllm_before_0_9_reads_the_old_kv_name_and_the_hit_rate_gauge():
    s = parse_metrics(VLLM_0_8)
    assert (s.kind, s.running, s.waiting, s.kv_usage) == ("vllm", 5.0, 2.0, 0.375)
    assert (s.prompt_tokens, s.generation_tokens) == (48213.0, 19004.0)
    assert s.prefix_queries is None and s.prefix_hit_rate == pytest.approx(0.62)
    assert s.slots is None  # vLLM does not export its max sequences


def test_vllm_current_prefers_kv_cache_usage_and_skips_created_samples():
    s = parse_metrics(VLLM_0_10.replace('vllm:gpu_cache_usage_perc{engine="0",' + M + '} 0.25',
                                        'vllm:gpu_cache_usage_perc{engine="0",' + M + '} 0.99'))
    assert (s.running, s.waiting, s.kv_usage, s.engines) == (7.0, 0.0, 0.25, 1)
    assert (s.prefix_queries, s.prefix_hits, s.generation_tokens) == (10000.0, 6500.0, 4000.0)


def test_vllm_data_parallel_sums_counts_and_averages_kv_over_engines():
    s = parse_metrics(VLLM_DP2, "vllm")
    assert (s.running, s.waiting, s.engines) == (10.0, 1.0, 2)
    assert s.kv_usage == pytest.approx(0.375)
    assert (s.prefix_queries, s.prefix_hits) == (4000.0, 2000.0)


def test_llama_server_has_no_kv_figure_and_takes_slots_from_props():
    s = parse_metrics(LLAMA_SERVER)
    assert (s.kind, s.running, s.waiting, s.kv_usage) == ("llama-server", 4.0, 3.0, None)
    assert (s.generation_tokens, s.prefix_queries) == (3469.0, None)
    assert total_slots(LLAMA_PROPS) == 4
    assert total_slots({"total_slots": 0}) is None and total_slots([]) is None


def test_newer_llama_server_exports_cached_prompt_tokens():
    s = parse_metrics(LLAMA_SERVER_CACHED)
    assert (s.prefix_hits, s.prefix_queries) == (2800.0, 4000.0)


def test_swarm_panel_metrics_from_the_real_exporter():
    from tests.app.server.test_server_common import modeled_service

    service = modeled_service(num_lanes=6)
    service.start()
    try:
        s = parse_metrics(render(build_registry(service, ServerMetrics())).decode())
    finally:
        service.stop()
    assert (s.kind, s.slots, s.running, s.waiting, s.kv_usage) == ("swarm-panel", 6, 0.0, 0.0, 0.0)
    assert s.prefix_queries == 0.0 and s.tok_s == 0.0


def test_text_that_is_not_an_engine_is_refused():
    with pytest.raises(ValueError, match="no vllm:, llamacpp: or swarm_panel:"):
        parse_metrics("process_cpu_seconds_total 3.0\n")
    with pytest.raises(ValueError, match="not Prometheus text"):
        parse_metrics("<html>nginx</html>\n{")


def _backend(kind: str = "auto", **config) -> Backend:
    return Backend(BackendConfig(url="http://127.0.0.1:9", kind=kind, **config))


def test_rates_come_from_counter_deltas_and_a_counter_reset_is_not_a_rate():
    b = _backend(slots=16)
    b.note_sample(parse_metrics(VLLM_0_10), now=10.0)
    later = VLLM_0_10.replace("generation_tokens_total{engine=\"0\"," + M + "} 4000",
                              "generation_tokens_total{engine=\"0\"," + M + "} 4500")
    later = later.replace("prefix_cache_queries_total{engine=\"0\"," + M + "} 10000",
                          "prefix_cache_queries_total{engine=\"0\"," + M + "} 11000")
    later = later.replace("prefix_cache_hits_total{engine=\"0\"," + M + "} 6500",
                          "prefix_cache_hits_total{engine=\"0\"," + M + "} 7400")
    b.note_sample(parse_metrics(later), now=12.0)
    assert b.tok_s == pytest.approx(250.0)
    assert b.hit_rate == pytest.approx(0.9)
    assert (b.slots, b.slots_source) == (16, "configured")
    b.note_sample(parse_metrics(VLLM_0_10), now=13.0)  # restarted: counters went back
    assert b.tok_s is None


def test_llama_server_hit_rate_comes_from_response_timings_and_kv_stays_unreported():
    b = _backend()
    b.props_slots = total_slots(LLAMA_PROPS)
    b.note_sample(parse_metrics(LLAMA_SERVER), now=1.0)
    tap = UsageTap()
    final = b'data: {"choices":[],"timings":{"cache_n":300,"prompt_n":100,"predicted_n":8}}\n\n'
    tap.feed(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\nda')
    tap.feed(final[2:] + b"data: [DONE]\n\n")
    b.note_response(*tap.found)
    b.note_sample(parse_metrics(LLAMA_SERVER), now=2.0)
    assert b.hit_rate == pytest.approx(0.75)
    assert (b.slots, b.slots_source) == (4, "reported")
    assert math.isnan(b.history[-1].kv_usage)
    assert b.full()  # 3 deferred and none of ours finished since


def test_a_down_backend_backs_off_exponentially_and_draws_a_gap():
    b = _backend()
    b.mark_down("connection refused", now=100.0)
    first = b.retry_at
    b.mark_down("connection refused", now=100.0)
    assert (first, b.retry_at, b.up) == (100.5, 101.0, False)
    assert math.isnan(b.history[-1].running)


def test_usage_shapes_openai_responses_and_anthropic():
    assert prompt_usage({"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 40}}}) == (50, 40)
    assert prompt_usage({"type": "response.completed", "response": {
        "usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 10}}}}) == (50, 10)
    assert prompt_usage({"type": "message_start", "message": {
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 45}}}) == (50, 45)
    assert prompt_usage({"choices": []}) is None


def test_inspect_reads_agent_system_prompt_and_priority():
    chat = inspect(b'{"messages":[{"role":"system","content":"S"},{"role":"user","content":"u"}],"user":"a1",'
                   b'"priority":-5,"stream":true}', None)
    anthropic = inspect(b'{"system":[{"type":"text","text":"S"}],"metadata":{"user_id":"a2"},"messages":[]}', "h")
    responses = inspect(b'{"instructions":"S","input":"hi"}', "a3")
    assert (chat.agent, chat.priority, chat.stream) == ("a1", -5, True)
    assert (anthropic.agent, responses.agent) == ("a2", "a3")
    assert chat.prefix == anthropic.prefix == responses.prefix != ""
    assert inspect(b'{"prompt":"x"}', None).agent == "anonymous"
    codex = inspect(b'{"input":"hi","prompt_cache_key":"session-1","previous_response_id":"resp_9"}', None)
    assert (codex.agent, codex.follows) == ("session-1", "resp_9")
    for bad in (b"[1]", b"{", b'{"priority":"high"}'):
        with pytest.raises(Exception, match="JSON|object|priority"):
            inspect(bad, None)


def test_backend_flags():
    assert parse_backend("vllm=http://gpu:8000/v1/").url == "http://gpu:8000"
    assert parse_backend("vllm=http://gpu:8000").kind == "vllm"
    assert parse_backend("http://127.0.0.1:8081").kind == "auto"
    with pytest.raises(ValueError, match="not an http"):
        parse_backend("gpu:8000")
