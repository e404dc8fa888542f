"""`swarm-panel serve --model hf:...` as a user runs it, against the loopback hub: the first start downloads the
model, with progress, and serves a real answer; the second starts with the hub gone and answers the same."""

from __future__ import annotations

import httpx
import pytest

from tests.app.models_hub.conftest import SMOL_REPO, hub  # noqa: F401 (the fixture)
from tests.gateway_fleet import Proc, free_port, wait_healthy

pytestmark = pytest.mark.slow


def answer(url: str) -> str:
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0,
        "max_tokens": 12})
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def test_serve_downloads_a_hub_model_then_starts_again_with_the_hub_gone(hub, tmp_path):  # noqa: F811
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
    answers = []
    for start in ("first", "second"):
        port = free_port()
        proc = Proc(["serve", "--model", f"hf:{SMOL_REPO}:Q4_1", "--port", str(port), "--threads", "1",
                     "--flash-attn", "off", "--extra-buffers", "off"],
                    tmp_path, f"serve-{start}", env=env)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc)
            answers.append(answer(f"http://127.0.0.1:{port}"))
        finally:
            proc.terminate()
        if start == "first":
            # The download said what it fetched and went through the hub's file route.
            assert "downloading mock-org/" in proc.text() and any("/cdn/" in r for r in hub.requests)
            hub.stop()
            hub.requests.clear()
    assert answers[0] and answers[0] == answers[1]
    assert not hub.requests
