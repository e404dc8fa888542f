"""Each launched agent's own key: good for its own inference only, under its own name; the scheduler needs
the panel's key (the user's --api-key, else the one the server made and published for CLIs here)."""

from __future__ import annotations

import stat

import httpx

from swarm_panel.app.service import panel_key_file
from tests.app.server.test_server_common import assert_error, modeled_service, panel, running

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
MESSAGES = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def agents_served(service) -> list[str]:
    return [record.agent for record in service.requests.records()]


def test_an_agents_key_serves_only_its_own_inference_under_its_own_name():
    service = modeled_service(num_lanes=4)
    with running(service) as srv:
        raw = service.agent_keys.issue("coder-1")
        key, url = bearer(raw), srv.url
        before = httpx.get(f"{url}/v1/scheduler").json()

        assert httpx.post(f"{url}/agents/coder-1/v1/chat/completions", json=CHAT, headers=key).status_code == 200
        # Its body and headers name someone else: it is served as itself all the same.
        disguised = CHAT | {"user": "boss"}
        assert httpx.post(f"{url}/v1/chat/completions", json=disguised, headers=key | {"x-agent-name": "boss"}
                          ).status_code == 200
        sub = {"x-claude-code-agent-id": "helper-123456789"}
        assert httpx.post(f"{url}/agents/coder-1/v1/chat/completions", json=CHAT, headers=key | sub).status_code == 200
        assert agents_served(service) == ["coder-1", "coder-1", "coder-1/er-123456789"]
        assert httpx.get(f"{url}/agents/coder-1/v1/models", headers=key).status_code == 200
        assert httpx.post(f"{url}/agents/coder-1/v1/messages", json=MESSAGES, headers={"x-api-key": raw}
                          ).status_code == 200

        assert_error(httpx.post(f"{url}/agents/boss/v1/chat/completions", json=CHAT, headers=key), 403,
                     code="forbidden", contains="cannot send as boss")
        anthropic = httpx.post(f"{url}/agents/boss/v1/messages", json=MESSAGES, headers=key)
        assert anthropic.status_code == 403
        assert anthropic.json()["type"] == "error" and anthropic.json()["error"]["type"] == "permission_error"
        assert_error(httpx.post(f"{url}/agents/coder-1/v1/chat/completions", json=CHAT,
                                headers=key | {"x-agent-priority": "-100"}), 403, contains="X-Agent-Priority")

        takeover = {"policy": "priority", "num_lanes": 1, "agent_priorities": {"coder-1": -100}}
        assert_error(httpx.put(f"{url}/agents/coder-1/v1/scheduler", json=takeover, headers=key), 403,
                     contains="panel's key")
        assert_error(httpx.put(f"{url}/v1/scheduler", json=takeover, headers=key), 403)
        assert_error(httpx.get(f"{url}/v1/scheduler", headers=key), 403)
        assert_error(httpx.get(f"{url}/metrics", headers=key), 403)
        assert httpx.get(f"{url}/v1/scheduler").json() == before


def test_without_an_api_key_the_users_clients_need_none_but_the_scheduler_needs_the_panels():
    service = modeled_service(num_lanes=4)
    with running(service) as srv:
        url = srv.url
        assert httpx.post(f"{url}/agents/mine/v1/chat/completions", json=CHAT).status_code == 200
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer("any")).status_code == 200
        assert httpx.get(f"{url}/v1/scheduler").status_code == 200
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert_error(httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 2}), 401, code="invalid_api_key",
                     contains="panel's key")
        assert_error(httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 2}, headers=bearer("guess")), 401)
        assert httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 2}, headers=panel(srv)).json()["num_lanes"] == 2

        # A launched agent's name needs its key: without it, nobody sends as that agent.
        key = service.agent_keys.issue("coder-1")
        assert_error(httpx.post(f"{url}/agents/coder-1/v1/chat/completions", json=CHAT), 403, contains="coder-1")
        assert_error(httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers={"x-agent-name": "coder-1"}), 403)
        assert_error(httpx.post(f"{url}/v1/chat/completions", json=CHAT | {"user": "coder-1"}), 403)
        assert_error(httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 2, "user": "coder-1"}),
                     403)
        anthropic = httpx.post(f"{url}/v1/messages", json=MESSAGES | {"metadata": {"user_id": "coder-1"}})
        assert anthropic.status_code == 403 and anthropic.json()["error"]["type"] == "permission_error"
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT | {"user": "coder-10"}).status_code == 200
        service.agent_keys.revoke(key)
        assert httpx.post(f"{url}/agents/coder-1/v1/chat/completions", json=CHAT).status_code == 200
        assert_error(httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 1}, headers=bearer(key)), 401)
        assert [r.agent for r in service.requests.records() if r.status == 200][-1] == "coder-1"


def test_the_published_key_is_the_users_alone_and_goes_with_the_server():
    with running(modeled_service()) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        path = panel_key_file.path_for(port)
        assert path.read_text() == srv.http.service.agent_keys.panel_key
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.exists()


def test_with_an_api_key_it_is_the_panels_and_an_agents_key_stays_scoped():
    service = modeled_service(api_key="users-own")
    with running(service) as srv:
        url = srv.url
        assert panel_key_file.read(url) is None  # the user's own key is never written down
        key = bearer(service.agent_keys.issue("coder-1"))
        assert_error(httpx.post(f"{url}/v1/chat/completions", json=CHAT), 401)
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=bearer("users-own")).status_code == 200
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=key).status_code == 200
        assert_error(httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 2}, headers=key), 403)
        assert_error(httpx.get(f"{url}/v1/scheduler"), 401)
        assert httpx.put(f"{url}/v1/scheduler", json={"num_lanes": 2}, headers=bearer("users-own")).status_code == 200
