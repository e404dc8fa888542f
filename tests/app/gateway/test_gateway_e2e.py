"""The gateway end to end: two real `swarm-panel serve` backends (tiny random-weight model) on loopback,
`swarm-panel gateway` in front, the official openai client in front of that.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from swarm_panel.app.service import panel_key_file
from tests.gateway_fleet import fleet

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SYSTEM = "You are one of several coding agents. Read the failing test and propose a patch. " * 6


def panel(url: str) -> dict[str, str]:
    """The key that steers the gateway, as a CLI here reads it."""
    return {"Authorization": f"Bearer {panel_key_file.read(url)}"}


def label(url: str) -> str:
    return url.split("//", 1)[1]


@pytest.fixture(scope="module")
def shared(tiny_model_path, tmp_path_factory):
    with fleet(tiny_model_path, tmp_path_factory.mktemp("fleet")) as running:
        yield running


def running_on(backend_url: str) -> float:
    for line in httpx.get(f"{backend_url}/metrics", timeout=5).text.splitlines():
        if line.startswith("swarm_panel:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no num_requests_running")


def test_the_openai_client_is_served_through_both_backends(shared):
    url, backends, _ = shared
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    seen = set()
    for i in range(4):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "system", "content": f"Prompt {i}. " * 20},
                                 {"role": "user", "content": "hi"}],
            max_tokens=4, user=f"solo-{i}", extra_body={"ignore_eos": True})
        assert raw.parse().usage.completion_tokens == 4
        seen.add(raw.headers["x-swarm-backend"])
    assert seen == {label(u) for u, _ in backends}

    chunks = list(client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "stream"}], max_tokens=6, stream=True,
        stream_options={"include_usage": True}, user="solo-0", extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 6
    assert client.completions.create(model="m", prompt="hello", max_tokens=3, user="solo-1",
                                     extra_body={"ignore_eos": True}).usage.completion_tokens == 3
    assert client.models.list().data
    metrics = httpx.get(f"{url}/metrics").text
    assert 'swarm_panel:gateway_agent_requests_total{agent="solo-0"} 2.0' in metrics
    assert 'swarm_panel:gateway_backend_up{backend="%s",kind="swarm-panel"} 1.0' % label(backends[1][0]) in metrics


async def _conversation(client: openai.AsyncOpenAI, agent: str, turns: int) -> list[tuple[str, int, int]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"I am {agent}; begin."}]
    served = []
    for turn in range(turns):
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=24, user=agent, extra_body={"ignore_eos": True})
        result = raw.parse()
        details = result.usage.prompt_tokens_details
        served.append((raw.headers["x-swarm-backend"], result.usage.prompt_tokens, details.cached_tokens or 0))
        messages += [{"role": "assistant", "content": result.choices[0].message.content},
                     {"role": "user", "content": f"tool result {turn} for {agent}"}]
    return served


def test_an_agents_turns_stay_on_the_backend_holding_its_conversation(shared):
    url, backends, _ = shared

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
            return await asyncio.gather(*(_conversation(client, f"conv-{i}", 4) for i in range(6)))

    results = asyncio.run(main())
    used = set()
    for turns in results:
        homes = {backend for backend, _, _ in turns}
        assert len(homes) == 1, turns
        used |= homes
        # From the second turn on the backend holds all but the newest messages.
        for _, prompt, cached in turns[1:]:
            assert cached >= 0.7 * prompt, turns
    assert used == {label(u) for u, _ in backends}


def test_a_hang_up_is_forwarded_to_the_backend(shared):
    url, backends, _ = shared
    by_label = {label(u): u for u, _ in backends}
    body = {"model": "m", "messages": [{"role": "user", "content": "long"}], "max_tokens": 4000,
            "stream": True, "user": "leaver", "ignore_eos": True}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            backend_url = by_label[response.headers["x-swarm-backend"]]
            lines = response.iter_lines()  # kept: dropping the iterator would close the stream here
            next(lines)
            deadline = time.monotonic() + 3
            while running_on(backend_url) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert running_on(backend_url) == 1
    deadline = time.monotonic() + 4
    while running_on(backend_url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_on(backend_url) == 0  # 4000 tokens would take this model several seconds more
    state = httpx.get(f"{url}/v1/scheduler").json()
    assert all(b["inflight"] == 0 for b in state["backends"])


def test_a_follow_up_by_previous_response_id_goes_to_the_backend_that_stored_it(shared):
    url, backends, _ = shared
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    # Round-robin would send each request to the other backend: only the pin keeps a chain together.
    assert httpx.put(f"{url}/v1/scheduler", headers=panel(url), json={"routing": "round-robin"}).json()["routing"] == "round-robin"
    try:
        raw = client.responses.with_raw_response.create(model="m", input="Plan the fix.", max_output_tokens=4,
                                                         user="chain")
        first, home = raw.parse(), raw.headers["x-swarm-backend"]
        previous = first.id
        for stream in (False, True, False):
            raw = client.responses.with_raw_response.create(
                model="m", input="Go on.", previous_response_id=previous, max_output_tokens=4, user="chain",
                stream=stream)
            assert raw.headers["x-swarm-backend"] == home
            ended = ("response.completed", "response.incomplete")
            response = next(e.response for e in raw.parse() if e.type in ended) if stream else raw.parse()
            assert response.previous_response_id == previous and response.usage.input_tokens_details.cached_tokens > 0
            previous = response.id
        for _ in range(2):  # whichever backend round-robin would pick next
            assert client.responses.retrieve(previous).previous_response_id
        assert [i.content[0].text for i in client.responses.input_items.list(previous).data] == ["Go on."]
        assert httpx.delete(f"{url}/v1/responses/{previous}").json()["deleted"] is True
        gone = httpx.get(f"{url}/v1/responses/{previous}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "response_not_found"
        # An id the gateway never relayed is looked for on every backend.
        assert httpx.get(f"{url}/v1/responses/resp_unknown").status_code == 404
    finally:
        httpx.put(f"{url}/v1/scheduler", headers=panel(url), json={"routing": "affinity"})


def test_bad_input_gets_openai_shaped_errors(shared):
    url, _, _ = shared
    cases = [(b"{nope", "invalid_json"), (b"[1, 2]", None), (b'{"priority": "high", "prompt": "x"}', None)]
    for body, code in cases:
        r = httpx.post(f"{url}/v1/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
        assert code is None or r.json()["error"]["code"] == code
    # The backend's own refusal comes back as it was.
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = httpx.put(f"{url}/v1/scheduler", headers=panel(url), json={"policy": "lottery"})
    assert r.status_code == 400 and "first-come, fewest-in-flight" in r.json()["error"]["message"]
    assert httpx.put(f"{url}/v1/scheduler", headers=panel(url), json={"policy": "fewest-in-flight"}).json()["policy"] == "fewest-in-flight"
    assert httpx.put(f"{url}/v1/scheduler", headers=panel(url), json={"policy": "first-come"}).json()["policy"] == "first-come"


def test_killing_a_backend_mid_run_fails_only_its_requests(tiny_model_path, tmp_path):
    with fleet(tiny_model_path, tmp_path) as (url, backends, _):
        by_label = {label(u): (u, p) for u, p in backends}

        async def agent(client, name: str, started: asyncio.Event, streaming: set[str]):
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "system", "content": f"{name} prompt. " * 10},
                                     {"role": "user", "content": "go"}],
                max_tokens=1500, stream=True, stream_options={"include_usage": True}, user=name,
                extra_body={"ignore_eos": True})
            home = raw.headers["x-swarm-backend"]
            usage = None
            try:
                async for chunk in raw.parse():
                    streaming.add(name)
                    if len(streaming) == 6:
                        started.set()
                    usage = chunk.usage or usage
            except openai.APIError as exc:
                return home, "failed", str(exc)
            return home, "done", usage.completion_tokens

        async def main():
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0,
                                          timeout=120) as client:
                started = asyncio.Event()
                streaming: set[str] = set()
                tasks = [asyncio.create_task(agent(client, f"k{i}", started, streaming)) for i in range(6)]
                await asyncio.wait_for(started.wait(), 60)
                state = httpx.get(f"{url}/v1/scheduler").json()
                victim = state["backends"][0]["name"]
                by_label[victim][1].kill()
                results = await asyncio.gather(*tasks)
                after = await client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "again"}], max_tokens=4, user="k0",
                    extra_body={"ignore_eos": True})
                return victim, results, after.headers["x-swarm-backend"]

        victim, results, k0_now = asyncio.run(main())
        on_victim = [r for r in results if r[0] == victim]
        on_survivor = [r for r in results if r[0] != victim]
        assert on_victim and on_survivor
        assert all(status == "failed" and "failed mid-stream" in detail for _, status, detail in on_victim)
        assert all(status == "done" and tokens == 1500 for _, status, tokens in on_survivor)
        assert k0_now != victim
        state = httpx.get(f"{url}/v1/scheduler").json()
        down = {b["name"]: b for b in state["backends"]}[victim]
        assert down["up"] is False and down["failed_requests"] == len(on_victim)
        assert httpx.get(f"{url}/health").json()["backends_up"] == [k0_now]
