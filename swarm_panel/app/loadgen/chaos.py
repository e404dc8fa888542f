"""A hostile swarm: agents that hang up mid-stream, send malformed requests, while the policy flips.

Used by the reliability test (short) and `swarm-panel chaos` (as long as asked) against any
OpenAI-compatible server, so this server and llama-server can be put through the same abuse.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import httpx

from swarm_panel.app.service import panel_key_file
from swarm_panel.runtime.policies.registry import POLICY_NAMES

# Each is a client's mistake: the server owes a 4xx with an error object, never a 5xx.
MALFORMED: list[tuple[str, bytes | dict]] = [
    ("invalid JSON", b'{"messages": [{"role": "user", "content": "hi"}'),
    ("not an object", b"[1, 2, 3]"),
    ("no messages", {"max_tokens": 5}),
    ("messages not a list", {"messages": "hello", "max_tokens": 5}),
    ("unknown role", {"messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 5}),
    ("negative max_tokens", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}),
    ("absurd max_tokens", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**12}),
    ("temperature 5", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 5}),
    ("n = 17 (more than 16 choices)", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "n": 17}),
    ("max_tokens a string", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}),
    ("content a number", {"messages": [{"role": "user", "content": 42}], "max_tokens": 5}),
]


@dataclass(slots=True)
class ChaosConfig:
    url: str
    agents: int = 64
    seconds: float = 20.0
    hangup_share: float = 0.15
    malformed_share: float = 0.10
    switch_every_s: float = 0.5
    switch_policy: bool = True
    max_tokens: tuple[int, int] = (4, 48)
    api_key: str | None = None
    seed: int = 0
    # llama-server and others may not honour ignore_eos; their exactness check is then "at most".
    exact_lengths: bool = True


@dataclass(slots=True)
class ChaosReport:
    completed: int = 0
    wrong_length: int = 0
    hangups: int = 0
    malformed: int = 0
    malformed_refused: int = 0
    server_errors: int = 0
    transport_errors: int = 0
    switches: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class _Chaos:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.report = ChaosReport()
        self.statuses: Counter[int] = Counter()
        self.deadline = 0.0

    def _problem(self, text: str) -> None:
        if len(self.report.problems) < 30:
            self.report.problems.append(text)

    def _status(self, status: int, what: str) -> None:
        self.statuses[status] += 1
        if status >= 500:
            self.report.server_errors += 1
            self._problem(f"{status} for {what}")

    async def agent(self, client: httpx.AsyncClient, index: int) -> None:
        rng = random.Random(self.config.seed * 1000 + index)
        while time.monotonic() < self.deadline:
            roll = rng.random()
            try:
                if roll < self.config.malformed_share:
                    await self._malformed(client, rng)
                elif roll < self.config.malformed_share + self.config.hangup_share:
                    await self._hang_up(client, rng, index)
                else:
                    await self._well_formed(client, rng, index)
            except httpx.HTTPError as exc:
                self.report.transport_errors += 1
                self._problem(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.1)

    def _body(self, rng: random.Random, index: int, stream: bool) -> dict:
        low, high = self.config.max_tokens
        body = {
            "model": "any",
            "messages": [{"role": "user", "content": f"agent {index}: summarise the diff in one line"}],
            "max_tokens": rng.randint(low, high),
            "temperature": 0.0,
            "ignore_eos": True,
            "user": f"chaos-{index:02d}",
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    async def _malformed(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        name, body = rng.choice(MALFORMED)
        self.report.malformed += 1
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        resp = await client.post("/v1/chat/completions", content=content,
                                 headers={"content-type": "application/json"})
        self._status(resp.status_code, name)
        try:
            error = resp.json().get("error")
        except (ValueError, AttributeError):
            error = None
        if 400 <= resp.status_code < 500 and isinstance(error, dict) and error.get("message"):
            self.report.malformed_refused += 1
        else:
            self._problem(f"{name}: HTTP {resp.status_code} {resp.text[:120]}")

    async def _hang_up(self, client: httpx.AsyncClient, rng: random.Random, index: int) -> None:
        body = self._body(rng, index, stream=True)
        body["max_tokens"] = self.config.max_tokens[1] * 4
        keep = rng.randint(0, 3)
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            self._status(resp.status_code, "a request hung up later")
            seen = 0
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    seen += 1
                    if seen > keep:
                        break
        self.report.hangups += 1

    async def _well_formed(self, client: httpx.AsyncClient, rng: random.Random, index: int) -> None:
        stream = rng.random() < 0.5
        body = self._body(rng, index, stream)
        want = body["max_tokens"]
        if stream:
            got, finish = await self._read_stream(client, body)
        else:
            resp = await client.post("/v1/chat/completions", json=body)
            self._status(resp.status_code, "a well-formed request")
            if resp.status_code != 200:
                return
            data = resp.json()
            got, finish = data["usage"]["completion_tokens"], data["choices"][0]["finish_reason"]
        if got is None:
            return
        self.report.completed += 1
        exact = got == want and finish == "length"
        if not exact and (self.config.exact_lengths or got > want):
            self.report.wrong_length += 1
            self._problem(f"asked {want} tokens, got {got} ({finish})")

    async def _read_stream(self, client: httpx.AsyncClient, body: dict) -> tuple[int | None, str | None]:
        got = finish = None
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            self._status(resp.status_code, "a well-formed stream")
            if resp.status_code != 200:
                await resp.aread()
                return None, None
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("error"):
                    self.report.server_errors += 1
                    self._problem(f"error event in a stream: {event['error']}")
                if event.get("usage"):
                    got = event["usage"]["completion_tokens"]
                for choice in event.get("choices") or ():
                    finish = choice.get("finish_reason") or finish
        return got, finish

    async def switcher(self, client: httpx.AsyncClient) -> None:
        rng = random.Random(self.config.seed)
        while time.monotonic() < self.deadline:
            await asyncio.sleep(self.config.switch_every_s)
            # The panel's key steers the server: the user's own, else the one a server here published.
            key = self.config.api_key or panel_key_file.read(self.config.url)
            resp = await client.put("/v1/scheduler", json={"policy": rng.choice(POLICY_NAMES)},
                                    headers={"Authorization": f"Bearer {key}"} if key else {})
            self._status(resp.status_code, "PUT /v1/scheduler")
            if resp.status_code == 200:
                self.report.switches += 1


async def run_chaos(config: ChaosConfig) -> ChaosReport:
    chaos = _Chaos(config)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=config.agents + 8, max_keepalive_connections=config.agents + 8)
    started = time.monotonic()
    chaos.deadline = started + config.seconds
    async with httpx.AsyncClient(base_url=config.url.rstrip("/"), headers=headers, limits=limits,
                                 timeout=httpx.Timeout(120.0, connect=10.0)) as client:
        tasks = [chaos.agent(client, i) for i in range(config.agents)]
        if config.switch_policy:
            tasks.append(chaos.switcher(client))
        await asyncio.gather(*tasks)
    chaos.report.seconds = time.monotonic() - started
    chaos.report.statuses = {str(k): v for k, v in sorted(chaos.statuses.items())}
    return chaos.report
