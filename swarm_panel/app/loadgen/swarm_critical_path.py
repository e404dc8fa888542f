"""The critical-path swarm (runtime.workloads.critical_path) over HTTP: each turn one streamed chat completion.

Tokens are charged to the agent as they stream in, so the round figures (shares, fair-share ratios,
Jain's index) are what a client sees. The water-filling reference needs the server's width: it is
read from GET /v1/scheduler where the server has one, else every open request counts as a lane.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import httpx

from swarm_panel.runtime.policies.fairness import fairness_figures
from swarm_panel.runtime.workloads.critical_path import CriticalPathSwarm, CriticalPathWorkload, Turn
from swarm_panel.runtime.workloads.workload import prompt_text

log = logging.getLogger(__name__)

ERROR_BACKOFF_S = 0.25


async def server_lanes(client: httpx.AsyncClient) -> int | None:
    try:
        resp = await client.get("/v1/scheduler")
        return int(resp.json()["num_lanes"]) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


class CriticalPathClient:
    def __init__(self, workload: CriticalPathWorkload, body: Callable[[Turn], dict],
                 on_round: Callable[[dict], None] | None = None) -> None:
        self.workload = workload
        self.body = body
        self.on_round = on_round
        self.swarm: CriticalPathSwarm | None = None
        self.errors = 0
        self.messages: list[str] = []
        self._tasks: set[asyncio.Task] = set()
        self._done = asyncio.Event()

    async def run(self, client: httpx.AsyncClient, stop: asyncio.Event, deadline: float | None) -> dict:
        self.swarm = CriticalPathSwarm(self.workload, lanes=await server_lanes(client))
        started = time.monotonic()
        for turn in self.swarm.start(0.0):
            self._spawn(client, turn, started)
        waiters = [asyncio.ensure_future(self._done.wait()), asyncio.ensure_future(stop.wait())]
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*waiters, *self._tasks]:
                task.cancel()
            await asyncio.gather(*waiters, *self._tasks, return_exceptions=True)
        return self.report(time.monotonic() - started)

    def report(self, seconds: float) -> dict:
        swarm = self.swarm
        served, fair = swarm.ledger.snapshot()
        tokens = sum(served.values())
        rounds = [r.as_dict() for r in swarm.rounds]
        return {
            "seconds": seconds,
            "tokens": tokens,
            "tok_s": tokens / seconds if seconds > 0 else 0.0,
            "rounds": rounds,
            "makespan_mean": sum(r["makespan"] for r in rounds) / len(rounds) if rounds else None,
            "fairness": fairness_figures(served, fair),
            "latency": swarm.latency_figures(),
            "others_latency_p95": swarm.others_latency_p95(),
            "errors": self.errors,
        }

    def _spawn(self, client: httpx.AsyncClient, turn: Turn, started: float) -> None:
        task = asyncio.ensure_future(self._turn(client, turn, started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _turn(self, client: httpx.AsyncClient, turn: Turn, started: float) -> None:
        ok = await self._stream(client, turn)
        if not ok:
            await asyncio.sleep(ERROR_BACKOFF_S)
        swarm = self.swarm
        rounds_before = len(swarm.rounds)
        for following in swarm.finished(turn, time.monotonic() - started, ok=ok):
            self._spawn(client, following, started)
        if self.on_round is not None and len(swarm.rounds) > rounds_before:
            self.on_round(swarm.rounds[-1].as_dict())
        if swarm.done:
            self._done.set()

    async def _stream(self, client: httpx.AsyncClient, turn: Turn) -> bool:
        chunks = 0
        try:
            async with client.stream("POST", "/v1/chat/completions", json=self.body(turn)) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    self._error(f"HTTP {resp.status_code}: {resp.text[:200]}")
                    return False
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    usage = event.get("usage")
                    if usage:
                        # A chunk may carry several tokens (held-back stop text); usage is exact.
                        self.swarm.served(turn.agent, max(usage["completion_tokens"] - chunks, 0))
                    for choice in event.get("choices") or ():
                        if (choice.get("delta") or {}).get("content"):
                            chunks += 1
                            self.swarm.served(turn.agent)
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _error(self, message: str) -> None:
        self.errors += 1
        if len(self.messages) < 20:
            self.messages.append(message)


def turn_body(turn: Turn, model: str, ignore_eos: bool, eos_logit_bias: dict[str, int]) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt_text(turn.agent_index, turn.seq, turn.prompt_tokens)}],
        "max_tokens": turn.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": turn.agent,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if eos_logit_bias:
        body["logit_bias"] = eos_logit_bias
    return body
