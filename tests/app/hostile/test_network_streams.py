"""Streams through the fence's network: a hang-up mid-stream reaches the server (bubblewrap: through the bridge
and the launcher's relay), which ends the request there, as it would for a client on the host."""

from __future__ import annotations

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.served import each_fence, launch
from tests.app.server.test_server_common import modeled_service, running, wait_until
from tests.app.workspace.git_repo import make_repo

ATTACK = """
import urllib.request

base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 20000, "ignore_eos": True,
        "stream": True}
request = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
answer = urllib.request.urlopen(request, timeout=60)
events = []
while len(events) < 3:
    line = answer.readline()
    if line.startswith(b"data: "):
        events.append(line)
answer.close()
seen["events"] = len(events)
"""


@pytest.fixture(scope="module")
def server():
    service = modeled_service(num_lanes=4)
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.mark.parametrize("fence", each_fence())
def test_a_hang_up_mid_stream_ends_the_request_on_the_server(server, fence, tmp_path):
    repo = make_repo(tmp_path / "repo", {"readme.txt": "a project\n"})
    before = len(server.service.requests.records())
    run = launch(server, fence, tmp_path, tmp_path / "state", ATTACK, folder=repo)
    assert run.completed, run.stderr.text
    assert seen(run) == {"events": 3}

    def ended():
        return [(r.agent, r.status, r.finish) for r in server.service.requests.records()[before:]]

    wait_until(lambda: ended() != [], what="the request to end on the server")
    assert ended() == [(run.name, 499, "abort")]
