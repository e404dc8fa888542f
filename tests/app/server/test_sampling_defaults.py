"""A request that names no temperature or top_p (Claude Code, Codex, opencode and Qwen Code send none)
gets the server's default, else the model's recommended sampling, else the API's own."""

from __future__ import annotations

from dataclasses import fields

import httpx
import pytest

from swarm_panel.runtime.llama import model_info
from swarm_panel.runtime.modeled.engine import ModeledEngine, ModeledFacts
from tests.app.server.test_server_common import modeled_service, running

RECOMMENDED = {"temperature": 0.3, "top_p": 0.8, "top_k": 20}


class RecommendingFacts(ModeledFacts):
    def recommended(self) -> dict[str, float]:
        return dict(RECOMMENDED)


class Recommending(ModeledEngine):
    """A modeled card whose model file recommends sampling, as a GGUF's general.sampling.* keys do."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.facts = RecommendingFacts(**{f.name: getattr(self.facts, f.name) for f in fields(self.facts)})


BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "model": "m"},
}


@pytest.fixture(scope="module")
def server():
    service = modeled_service(engine_class=Recommending)
    with running(service) as srv:
        srv.service = service
        yield srv


@pytest.fixture(scope="module")
def server_with_defaults():
    service = modeled_service(engine_class=Recommending, default_temperature=0.0)
    with running(service) as srv:
        srv.service = service
        yield srv


def sampling_of(server, path: str, agent: str, **knobs):
    resp = httpx.post(f"{server.url}/agents/{agent}{path}", json=BODIES[path] | knobs, timeout=30)
    assert resp.status_code == 200, resp.text
    return server.service.activity.latest(agent).request.sampling, resp


@pytest.mark.parametrize("path", list(BODIES))
def test_the_models_recommended_sampling_fills_what_a_request_leaves_out(server, path):
    agent = "leaves-out" + path.replace("/", "-")
    sampling, _ = sampling_of(server, path, agent)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.3, 0.8, 20)
    sampling, _ = sampling_of(server, path, agent, temperature=0.9, top_p=0.5)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.9, 0.5, 20)


@pytest.mark.parametrize("path", list(BODIES))
def test_the_servers_default_wins_over_the_models(server_with_defaults, path):
    sampling, _ = sampling_of(server_with_defaults, path, "defaults" + path.replace("/", "-"))
    assert (sampling.temperature, sampling.top_p) == (0.0, 0.8)


def test_a_response_says_the_sampling_it_ran_with(server):
    _, resp = sampling_of(server, "/v1/responses", "echo")
    assert (resp.json()["temperature"], resp.json()["top_p"]) == (0.3, 0.8)


def test_without_a_recommendation_the_apis_defaults_stand():
    service = modeled_service()
    with running(service) as srv:
        srv.service = service
        sampling, _ = sampling_of(srv, "/v1/chat/completions", "plain")
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (1.0, 1.0, 0)


def test_the_recommendation_is_read_from_the_files_keys_else_the_card(monkeypatch):
    keys = {"general.sampling.temp": "0.6", "general.sampling.top_p": "0.95", "general.sampling.top_k": "-1",
            "general.sampling.min_p": "7", "general.sampling.penalty_repeat": "1.05"}
    monkeypatch.setattr(model_info, "meta_value", lambda model, key: keys.get(key))
    # top_k -1 is off; a min_p no request may ask is left out.
    assert model_info.recommended_sampling(None, "Any") == {"temperature": 0.6, "top_p": 0.95, "top_k": 0,
                                                            "repeat_penalty": 1.05}
    keys.clear()
    assert model_info.recommended_sampling(None, "SmolLM2-135M-Instruct") == {"temperature": 0.2, "top_p": 0.9}
    assert model_info.recommended_sampling(None, "Other") == {}
