"""Prefix reuse seen from outside: usage.prompt_tokens_details.cached_tokens and the Prometheus counters."""

from __future__ import annotations

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.app.server.test_server_common import modeled_service, panel, running

SYSTEM = "You are a careful coding agent. " * 40


def ask(client: openai.OpenAI, turn: str):
    return client.chat.completions.create(
        model="m", max_tokens=5, user="agent-a",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": turn}])


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_a_repeated_system_prompt_is_served_from_cache_and_counted():
    with running(modeled_service()) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x")
        first = ask(client, "first task")
        second = ask(client, "second task")
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached >= len(SYSTEM) // 4 - 8
        assert cached < second.usage.prompt_tokens
        assert metric(srv.url, "swarm_panel:prefix_cache_hits_total") == cached
        assert metric(srv.url, "swarm_panel:prefix_cache_queries_total") == (
            first.usage.prompt_tokens + second.usage.prompt_tokens)


def test_reuse_switched_off_over_http_computes_everything():
    with running(modeled_service()) as srv:
        assert httpx.put(f"{srv.url}/v1/scheduler", headers=panel(srv), json={"prefix_cache": False}).json()["prefix_cache"] is False
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x")
        ask(client, "first task")
        assert ask(client, "second task").usage.prompt_tokens_details.cached_tokens == 0
