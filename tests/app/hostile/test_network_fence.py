"""The fence's network against a hostile stand-in launched through the real launcher at a real server: it
reaches the endpoint (a streamed chat answer comes through whole), and nothing else of the host: not a TCP
service on 127.0.0.1, not an abstract Unix socket, not the scheduler with its key, not another
agent's name."""

from __future__ import annotations

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.served import abstract_socket, each_fence, host_service, launch, served
from tests.app.workspace.git_repo import make_repo

# The stand-in's attack: HOST_PORT and ABSTRACT_NAME are filled in per test.
ATTACK = """
import urllib.error, urllib.request

base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
root = base.split("/agents/")[0]

def call(method, url, body=None, key=key):
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()

chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "ignore_eos": True}
seen["scheduler"] = call("PUT", root + "/v1/scheduler",
                         {"policy": "priority", "num_lanes": 1, "agent_priorities": {name: 100}})
seen["scheduler_without_key"] = call("PUT", root + "/v1/scheduler", {"num_lanes": 1}, key="")
seen["as_another"] = call("POST", root + "/agents/someone-else/v1/chat/completions", chat)
seen["models"] = call("GET", base + "/models")[0]

request = urllib.request.Request(base + "/chat/completions", method="POST",
                                 data=json.dumps(chat | {"stream": True,
                                                         "stream_options": {"include_usage": True}}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
with urllib.request.urlopen(request, timeout=60) as answer:
    events = [line for line in answer if line.startswith(b"data: ")]
# The usage chunk comes last before the end: the tokens the server sent, whatever text they make.
seen["stream"] = [json.loads(events[-2][len(b"data: "):])["usage"]["completion_tokens"], events[-1].decode().strip()]

try:
    socket.create_connection(("127.0.0.1", HOST_PORT), timeout=5).recv(64)
    seen["host_tcp"] = "connected"
except OSError as exc:
    seen["host_tcp"] = f"{type(exc).__name__}: {exc}"
try:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect("\\0ABSTRACT_NAME")
    seen["abstract"] = "connected"
except OSError as exc:
    seen["abstract"] = f"{type(exc).__name__}: {exc}"
"""


def attack_on(port: int, abstract: str) -> str:
    return ATTACK.replace("HOST_PORT", str(port)).replace("ABSTRACT_NAME", abstract)


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with served(tiny_model_path) as srv:
        yield srv


@pytest.mark.parametrize("fence", each_fence())
def test_an_agent_reaches_the_endpoint_and_nothing_else_of_the_host(server, fence, tmp_path):
    repo = make_repo(tmp_path / "repo", {"readme.txt": "a project\n"})
    before = server.service.engine_thread.config
    with host_service() as port, abstract_socket() as abstract:
        run = launch(server, fence, tmp_path, tmp_path / "state", attack_on(port, abstract), folder=repo)
    assert run.completed, run.stderr.text
    said = seen(run)
    assert "error" not in said, said

    status, body = said["scheduler"]
    assert status == 403 and "panel's key" in body, said
    assert said["scheduler_without_key"][0] == 401, said
    after = server.service.engine_thread.config
    assert (after.policy, after.num_lanes, dict(after.agent_priorities)) == (
        before.policy, before.num_lanes, dict(before.agent_priorities))

    status, body = said["as_another"]
    assert status == 403 and "someone-else" in body and '"type":"permission_error"' in body.replace(" ", "")
    assert said["models"] == 200
    tokens, last = said["stream"]
    assert tokens == 8 and last == "data: [DONE]"  # streamed through whole
    assert [t.agent for t in server.service.requests.records(agent=run.name)], "its chat was served as itself"

    assert said["host_tcp"] != "connected", said
    assert said["abstract"].startswith("PermissionError"), said  # the seccomp filter's, in either fence
    assert not server.service.agent_keys.names(), "its key was revoked when it ended"
