"""The network opt-in: the proxy a fenced agent reaches the internet through refuses the host and its network
(loopback, private, link-local, reserved addresses, whatever a name resolves to). No internet here, so what is
tested is what it refuses, directly and from inside each fence."""

from __future__ import annotations

import asyncio

import pytest

from swarm_panel.app.fence.proxy import Proxy, Refused, refusal, resolve
from tests.app.hostile.harness import seen
from tests.app.hostile.served import each_fence, host_service, launch, served
from tests.app.workspace.git_repo import make_repo

REFUSED = ["127.0.0.1", "127.8.9.10", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
           "100.64.0.1", "0.0.0.0", "224.0.0.1", "::ffff:127.0.0.1", "fe80::1", "fc00::1", "192.0.2.1"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "151.101.1.69"]


@pytest.mark.parametrize("address", REFUSED)
def test_the_host_and_private_networks_are_refused(address):
    assert refusal(address) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert refusal(address) is None


def test_a_name_is_checked_by_every_address_it_resolves_to():
    with pytest.raises(Refused, match="loopback") as refused:
        asyncio.run(resolve("localhost", 80))
    assert refused.value.status == 403


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    answer = await reader.read()
    writer.close()
    return answer


def test_the_proxy_answers_a_request_for_the_host_with_a_403():
    async def scenario(service_port: int) -> list[bytes]:
        proxy = await Proxy().start()
        try:
            return [await _ask(proxy.port, request) for request in (
                f"CONNECT 127.0.0.1:{service_port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(),
                f"GET http://localhost:{service_port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
                b"GET / HTTP/1.1\r\nHost: anything\r\n\r\n")]
        finally:
            await proxy.close()

    with host_service() as port:
        connect, plain, origin_form = asyncio.run(scenario(port))
    assert connect.startswith(b"HTTP/1.1 403 ") and b"loopback" in connect and b"host secret" not in connect
    assert plain.startswith(b"HTTP/1.1 403 ") and b"host secret" not in plain
    assert origin_form.startswith(b"HTTP/1.1 400 ")


ATTACK = """
import urllib.request

proxy = os.environ["HTTPS_PROXY"]
seen["proxy_set"] = proxy.startswith("http://127.0.0.1:") and os.environ["NO_PROXY"].startswith("127.0.0.1")
host, port = proxy[len("http://"):].split(":")
tunnel = socket.create_connection((host, int(port)), timeout=10)
tunnel.sendall(b"CONNECT 127.0.0.1:HOST_PORT HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
seen["through_proxy"] = tunnel.recv(4096).decode(errors="replace")
try:
    socket.create_connection(("127.0.0.1", HOST_PORT), timeout=5)
    seen["direct"] = "connected"
except OSError as exc:
    seen["direct"] = str(exc)
base = os.environ["OPENAI_BASE_URL"]
request = urllib.request.Request(base + "/models", headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(request, timeout=30) as answer:  # NO_PROXY: the endpoint stays direct
    seen["endpoint"] = answer.status
"""


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with served(tiny_model_path) as srv:
        yield srv


@pytest.mark.parametrize("fence", each_fence())
def test_with_the_network_an_agent_still_cannot_reach_the_host(server, fence, tmp_path):
    repo = make_repo(tmp_path / "repo", {"readme.txt": "a project\n"})
    with host_service() as port:
        run = launch(server, fence, tmp_path, tmp_path / "state", ATTACK.replace("HOST_PORT", str(port)),
                     folder=repo, network=True)
    assert run.completed, run.stderr.text
    said = seen(run)
    assert "error" not in said, said
    assert said["proxy_set"] is True
    assert said["through_proxy"].startswith("HTTP/1.1 403 ") and "host secret" not in said["through_proxy"]
    assert said["direct"] != "connected"
    assert said["endpoint"] == 200
