"""HttpServer's lifecycle on the current loop, its refusals, and the `swarm-panel serve` command."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys

import httpx
import openai
import pytest

from swarm_panel.app.cli.serve import settings_from_args
from swarm_panel.app.server.http_server import HttpServer, PortInUse, ThreadedHttpServer
from tests.app.server.test_server_common import modeled_service, served_url


def test_start_on_the_current_loop_serves_and_stop_releases_the_port():
    service = modeled_service()
    service.start()

    async def main() -> int:
        http = HttpServer(service, port=0)
        await http.start()
        port = int(http.url.rsplit(":", 1)[1])
        assert port > 0 and http.running
        async with openai.AsyncOpenAI(base_url=f"{http.url}/v1", api_key="x", max_retries=0) as client:
            result = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                          max_tokens=4)
        assert result.usage.completion_tokens == 4
        await http.stop()
        assert not http.running
        return port

    try:
        port = asyncio.run(main())
    finally:
        service.stop()
    with socket.create_server(("127.0.0.1", port)):  # free again
        pass


def test_a_port_in_use_raises_port_in_use_with_a_clear_message():
    service = modeled_service()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"port {port} on 127.0.0.1 is already in use"):
            ThreadedHttpServer(service, port=port).start()


def test_a_public_host_needs_an_api_key():
    with pytest.raises(ValueError, match="without an API key"):
        HttpServer(modeled_service(), host="0.0.0.0")
    HttpServer(modeled_service(api_key="k"), host="0.0.0.0")
    HttpServer(modeled_service(insecure_public_without_api_key=True), host="0.0.0.0")
    HttpServer(modeled_service(), host="localhost")


def test_serve_flags_override_settings(monkeypatch):
    from swarm_panel.app.cli.main import build_parser

    monkeypatch.setenv("SWARM_PANEL_NUM_LANES", "3")
    monkeypatch.setenv("SWARM_PANEL_POLICY", "naive")
    args = build_parser().parse_args(["serve", "--engine", "modeled", "--port", "0", "--policy", "shrinking",
                                      "--api-key", "k", "--kv-budget", "5000"])
    s = settings_from_args(args)
    assert (s.engine, s.port, s.policy, s.num_lanes, s.kv_budget) == ("modeled", 0, "shrinking", 3, 5000)
    assert s.api_key.get_secret_value() == "k"
    with pytest.raises(ValueError, match="num_lanes"):
        settings_from_args(build_parser().parse_args(["serve", "--num-lanes", "0"]))


@pytest.mark.slow
def test_serve_command_runs_headless_and_stops_on_sigterm(tmp_path):
    env = dict(os.environ, SWARM_PANEL_CONFIG_FILE=str(tmp_path / "none.toml"), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "swarm_panel.app.cli.main", "serve", "--engine", "modeled", "--port", "0", "--num-lanes", "4"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = served_url(proc, 60)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        assert client.completions.create(model="m", prompt="hi", max_tokens=2).usage.completion_tokens == 2
        assert httpx.get(f"{url}/health").json()["status"] == "ok"

        port = url.rsplit(":", 1)[1]
        second = subprocess.run([*cmd[:-4], "--port", port], capture_output=True, text=True, env=env, timeout=60)
        assert second.returncode == 1
        assert f"port {port} on 127.0.0.1 is already in use" in second.stderr

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
