"""The security baseline: loopback by default, keys for anything else, no CORS unless asked, no file access."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.http_server import HttpServer
from app.settings import Settings
from tests.test_server_common import modeled_service, running


def test_defaults_listen_on_loopback_only():
    assert Settings().host == "127.0.0.1"
    assert Settings().api_key is None


def test_a_public_address_needs_an_api_key_or_the_loud_flag():
    service = modeled_service(host="0.0.0.0")
    with pytest.raises(ValueError, match="API key"):
        asyncio.run(HttpServer(service).start())
    keyed = modeled_service(host="0.0.0.0", api_key="s3cret")
    loud = modeled_service(host="0.0.0.0", insecure_public_without_api_key=True)
    for service in (keyed, loud):
        async def start_stop(service=service):
            server = HttpServer(service)
            await server.start()
            await server.stop()
        service.start()
        try:
            asyncio.run(start_stop())
        finally:
            service.stop()


def test_no_cors_headers_unless_configured():
    preflight = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    with running(modeled_service()) as srv:
        resp = httpx.options(f"{srv.url}/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in resp.headers
    with running(modeled_service(cors_origins=["http://localhost:3000"])) as srv:
        ok = httpx.options(f"{srv.url}/v1/chat/completions",
                           headers=preflight | {"Origin": "http://localhost:3000"})
        assert ok.headers["access-control-allow-origin"] == "http://localhost:3000"
        evil = httpx.options(f"{srv.url}/v1/chat/completions", headers=preflight)
        assert evil.headers.get("access-control-allow-origin") != "http://evil.example"


def test_nothing_over_http_opens_a_file_path(tmp_path):
    secret = tmp_path / "secret.gguf"
    secret.write_text("not for you")
    with running(modeled_service()) as srv:
        body = {"model": str(secret), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        resp = httpx.post(f"{srv.url}/v1/chat/completions", json=body)
        assert resp.status_code == 200 and "not for you" not in resp.text
        for change in ({"model": str(secret)}, {"engine": "llama"}, {"model_path": str(secret)}):
            put = httpx.put(f"{srv.url}/v1/scheduler", json=change)
            assert put.status_code == 400
    assert secret.read_text() == "not for you"
