"""The security baseline: loopback by default, keys for anything else, no CORS unless asked, no file access."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import pytest

from swarm_panel.app.server.http_server import HttpServer
from swarm_panel.app.settings.schema import Settings
from tests.app.server.test_server_common import modeled_service, panel, running


def lan_address() -> str:
    """This machine's address on its network (no packet is sent); skips the test on a machine without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("no network interface besides loopback")
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("no network interface besides loopback")
    return address


def answers(base: str, **headers: str) -> int | None:
    """The status /v1/models answers with at `base`, or None when nothing listens there."""
    try:
        return httpx.get(f"{base}/v1/models", headers=headers, timeout=5).status_code
    except httpx.ConnectError:
        return None


def test_defaults_listen_on_loopback_only():
    assert Settings().host == "127.0.0.1"
    assert Settings().api_key is None
    lan = lan_address()
    with running(modeled_service(host=Settings().host)) as srv:
        port = srv.url.rsplit(":", 1)[1]
        assert answers(f"http://127.0.0.1:{port}") == 200
        assert answers(f"http://{lan}:{port}") is None


def test_a_public_address_needs_an_api_key_or_the_loud_flag():
    with pytest.raises(ValueError, match="API key"):
        HttpServer(modeled_service(host="0.0.0.0"))
    lan = lan_address()
    keyed = modeled_service(host="0.0.0.0", api_key="s3cret")
    loud = modeled_service(host="0.0.0.0", insecure_public_without_api_key=True)
    with running(keyed) as srv:
        base = f"http://{lan}:{srv.url.rsplit(':', 1)[1]}"
        assert answers(base) == 401
        assert answers(base, authorization="Bearer wrong") == 401
        assert answers(base, authorization="Bearer s3cret") == 200
        assert answers(base, **{"x-api-key": "s3cret"}) == 200
    with running(loud) as srv:
        assert answers(f"http://{lan}:{srv.url.rsplit(':', 1)[1]}") == 200


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


OPENED: list[str] = []
_WATCHED: list[Path] = []


def _record_opens(event: str, args: tuple) -> None:
    # Audit hooks stay for the life of the process: this one records only while a test watches a folder.
    if _WATCHED and event in ("open", "os.listdir", "os.scandir") and isinstance(args[0], str | bytes | Path):
        path = str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace"))
        if any(path.startswith(str(folder)) for folder in _WATCHED):
            OPENED.append(path)


sys.addaudithook(_record_opens)


def scheduler_config(url: str) -> dict:
    state = httpx.get(f"{url}/v1/scheduler").json()
    return {key: state[key] for key in ("policy", "num_lanes", "prefill_chunk", "kv_budget", "prefix_cache")}


def test_nothing_over_http_opens_a_file_path(tmp_path):
    secret = tmp_path / "secret.gguf"
    secret.write_text("not for you")
    service = modeled_service()
    with running(service) as srv:
        engine = service.engine
        model_id = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
        before = scheduler_config(srv.url)
        _WATCHED.append(tmp_path)
        try:
            body = {"model": str(secret), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            resp = httpx.post(f"{srv.url}/v1/chat/completions", json=body)
            puts = {key: httpx.put(f"{srv.url}/v1/scheduler", headers=panel(srv), json={key: value})
                    for key, value in (("model", str(secret)), ("engine", "llama"), ("model_path", str(secret)))}
            card = httpx.get(f"{srv.url}/v1/models/{secret}")
        finally:
            _WATCHED.remove(tmp_path)
        assert OPENED == []
        assert resp.status_code == 200 and resp.json()["model"] == model_id and "not for you" not in resp.text
        for key, put in puts.items():
            assert put.status_code == 400 and put.json()["error"]["param"] == key, put.text
        assert card.status_code == 404
        # The same engine still serves, with the same scheduler: nothing was loaded or switched.
        assert service.engine is engine
        assert scheduler_config(srv.url) == before
