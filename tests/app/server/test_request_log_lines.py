"""The server writes one line per API call to its request log, named by the agent's base URL."""

import logging

import httpx

from tests.app.server.test_server_common import modeled_service, running, wait_until

SYSTEM = "You are a coding agent. " * 80


def test_each_call_is_logged_as_the_agent_its_base_url_names(caplog):
    service = modeled_service()
    with running(service) as srv, caplog.at_level(logging.INFO, logger="swarm_panel.requests"):
        base = f"{srv.url}/agents/codex-1/v1"
        for question in ("What does hello.py print?", "And main.py?"):
            answer = httpx.post(f"{base}/chat/completions", timeout=30, json={
                "max_tokens": 8, "user": "someone-else",
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]})
            assert answer.status_code == 200, answer.text
        refused = httpx.post(f"{base}/chat/completions", content=b"{not json", timeout=10)
        assert refused.status_code == 400
        assert httpx.head(f"{srv.url}/").status_code in (404, 405)  # Claude Code's probe: not a request
        wait_until(lambda: len(service.requests.records()) == 3, what="three log lines")
    first, second, error = service.requests.records()
    assert first.agent == second.agent == error.agent == "codex-1"
    assert first.endpoint == "/v1/chat/completions" and first.status == 200 and first.finish in ("stop", "length")
    assert first.computed_tokens == first.prompt_tokens and first.reused_tokens == 0
    # The second call shares the system prompt: reused and computed add up to its prompt.
    assert second.reused_tokens > 0 and second.computed_tokens + second.reused_tokens == second.prompt_tokens
    assert 0 < first.output_tokens <= 8 and first.ttft_s is not None and first.ttft_s <= first.seconds
    assert error.status == 400 and error.note
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "swarm_panel.requests"]
    assert len(warnings) == 1 and "codex-1 /v1/chat/completions 400" in warnings[0].getMessage()
