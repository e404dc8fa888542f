"""The agent-swarm load generator: closed-loop agents on any OpenAI-compatible endpoint over HTTP.

Each agent sends its next chat request the moment its last one returns; output lengths cycle
through a list, offset by agent, exactly as the in-process bench does. With `turns`, each agent is a
multi-turn conversation: a system prompt shared by all agents, its task, then after every turn the
assistant's reply and a tool result appended to its own messages, the whole list resent each turn. It works against this
server, llama.cpp's llama-server, vLLM or anything else that streams OpenAI chat completions.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import httpx

from swarm_panel.app.loadgen.swarm_critical_path import CriticalPathClient, turn_body
from swarm_panel.runtime.serving.metrics import percentile
from swarm_panel.runtime.workloads.agent_script import REPEAT_PENALTY, AgentConversation
from swarm_panel.runtime.workloads.critical_path import CriticalPathWorkload
from swarm_panel.runtime.workloads.workload import (
    ARTICLE_LENGTHS,
    SwarmWorkload,
    agent_name,
    prompt_text,
    system_text,
    tool_text,
)

LENGTH_PRESETS: dict[str, tuple[int, ...]] = {
    "article": ARTICLE_LENGTHS,
    "tool calls": (12, 20, 30, 40, 60, 80),
    "long plans": (300, 450, 600, 750, 900),
}

ERROR_BACKOFF_S = 0.25
REAL_AGENT_TURNS = 4

@dataclass(slots=True)
class SwarmConfig:
    url: str
    agents: int = 8
    seconds: float | None = None
    requests_per_agent: int | None = None
    lengths: tuple[int, ...] = ARTICLE_LENGTHS
    spread: float = 1.0
    prompt_tokens: int = 32
    # The first agent pastes a file: its prompts are about this many tokens (0: like the others).
    long_prompt_tokens: int = 0
    api_key: str | None = None
    model: str = "swarm-panel"
    # Random-weight models stop at random; benchmarks need exact lengths.
    ignore_eos: bool = True
    eos_token_ids: tuple[int, ...] = ()
    timeout_s: float = 600.0
    # A system message of about this many tokens, the same for every agent (0: none).
    system_tokens: int = 0
    # Multi-turn conversations of this many turns per agent (sets requests_per_agent).
    turns: int | None = None
    # Tool result appended (as a user message) after each reply in a conversation.
    tool_tokens: int = 64
    # Real agents (runtime.workloads.agent_script): coding chats of `turns` turns (4 unless given), one after
    # another, ended by the model's own stop and capped at reply_tokens; lengths are then unused.
    real_agents: bool = False
    reply_tokens: int = 256
    # The shared system message's exact text (a harness's system prompt and tools, say); overrides system_tokens.
    system_prompt: str | None = None
    # After each turn of a conversation the agent's tool runs for a time drawn from this range (seeded by
    # agent, the same for every server), so agents come back in an irregular order, idle meanwhile.
    tool_seconds: tuple[float, float] = (0.0, 0.0)
    # A coordinator, its workers and a noisy neighbour (app.loadgen.swarm_critical_path) instead of `agents`
    # closed-loop agents; it ends after its rounds (or `seconds`).
    critical_path: CriticalPathWorkload | None = None

    def __post_init__(self) -> None:
        if self.reply_tokens < 1:
            raise ValueError(f"reply_tokens must be at least 1, got {self.reply_tokens}")
        if self.real_agents:
            self.turns = self.turns or REAL_AGENT_TURNS
            self.ignore_eos = False
            if self.turns < 1:
                raise ValueError(f"turns must be at least 1, got {self.turns}")
            if self.seconds is None and self.requests_per_agent is None:
                self.requests_per_agent = self.turns
        elif self.turns is not None:
            if self.turns < 1:
                raise ValueError(f"turns must be at least 1, got {self.turns}")
            self.requests_per_agent = self.turns
        if not 0 <= self.tool_seconds[0] <= self.tool_seconds[1]:
            raise ValueError(f"tool_seconds must be a range 0 <= low <= high, got {self.tool_seconds}")
        if self.system_tokens < 0 or self.tool_tokens < 0 or self.long_prompt_tokens < 0:
            raise ValueError("system_tokens, tool_tokens and long_prompt_tokens must not be negative")
        if not 1 <= self.agents <= 1024:
            raise ValueError(f"agents must be within 1..1024, got {self.agents}")
        if self.seconds is None and self.requests_per_agent is None and self.critical_path is None:
            raise ValueError("give a duration (seconds) or a number of requests per agent")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError("seconds must be positive")
        self.url = self.url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]

    @property
    def workload(self) -> SwarmWorkload:
        return SwarmWorkload(
            agents=self.agents,
            lengths=self.lengths,
            requests_per_agent=self.requests_per_agent or 1,
            prompt_tokens=self.prompt_tokens,
            spread=self.spread,
            system_tokens=self.system_tokens,
            conversation=self.turns is not None,
            tool_tokens=self.tool_tokens,
        )


@dataclass(slots=True)
class AgentReport:
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    # usage.prompt_tokens_details.cached_tokens, where the server reports it.
    cached_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    # Prompt tokens the server computed (prompt less cached) on each turn after a conversation's first.
    follow_up_computed: list[int] = field(default_factory=list)


@dataclass(slots=True)
class SwarmReport:
    agents: int
    requests: int
    errors: int
    tokens: int
    seconds: float
    tok_s: float
    ttft_p50: float | None
    ttft_p95: float | None
    latency_p50: float | None
    latency_p95: float | None
    error_messages: list[str] = field(default_factory=list)
    per_agent: dict[str, dict] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    # The critical-path swarm's figures: rounds (makespan, shares, Jain), fairness and latency per agent.
    critical_path: dict | None = None
    # With long_prompt_tokens: TTFT and turn latency (p50, p95) of every agent but the long-prompt one.
    short_prompts: dict | None = None
    # Prompt tokens computed per follow-up turn (a conversation's turns after its first), p50 and p95.
    follow_up_computed_p50: float | None = None
    follow_up_computed_p95: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class _Swarm:
    def __init__(self, config: SwarmConfig, stop: asyncio.Event | None) -> None:
        self.config = config
        self.stop = stop or asyncio.Event()
        self.reports: dict[str, AgentReport] = defaultdict(AgentReport)
        self.messages: list[str] = []
        self.deadline = None
        self.conversations: dict[int, list[dict]] = {}
        self.chats: dict[int, AgentConversation] = {}
        self.chats_started: dict[int, int] = defaultdict(int)

    def _chat(self, agent: int) -> AgentConversation:
        """The agent's current chat; after `turns` turns it moves on to its next task."""
        chat = self.chats.get(agent)
        if chat is None or chat.turn >= self.config.turns:
            chat = self.chats[agent] = AgentConversation(agent, self.chats_started[agent])
            self.chats_started[agent] += 1
        return chat

    def _messages(self, agent: int, turn: int) -> list[dict]:
        c = self.config
        if c.real_agents:
            return list(self._chat(agent).messages)
        shared = c.system_prompt if c.system_prompt is not None else system_text(c.system_tokens)
        system = [{"role": "system", "content": shared}] if shared else []
        prompt_tokens = c.long_prompt_tokens if agent == 0 and c.long_prompt_tokens else c.prompt_tokens
        if c.turns is None:
            return system + [{"role": "user", "content": prompt_text(agent, turn, prompt_tokens)}]
        if agent not in self.conversations:
            self.conversations[agent] = system + [{"role": "user", "content": prompt_text(agent, 0, prompt_tokens)}]
        return list(self.conversations[agent])

    def _replied(self, agent: int, turn: int, reply: str) -> None:
        """A conversation turn ended: the reply and the tool result it led to join the agent's history."""
        if self.config.real_agents:
            self.chats[agent].replied(reply)
            return
        if self.config.turns is None:
            return
        self.conversations[agent] += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": tool_text(agent, turn, self.config.tool_tokens)},
        ]

    def _body(self, agent: int, turn: int) -> dict:
        c = self.config
        body = {
            "model": c.model,
            "messages": self._messages(agent, turn),
            "max_tokens": c.reply_tokens if c.real_agents else c.workload.max_tokens(agent, turn),
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": agent_name(agent),
        }
        if c.real_agents:
            body["repeat_penalty"] = REPEAT_PENALTY
        if c.ignore_eos:
            body["ignore_eos"] = True
        if c.eos_token_ids and not c.real_agents:
            body["logit_bias"] = {str(t): -100 for t in c.eos_token_ids}
        return body

    def _more(self, turn: int) -> bool:
        if self.stop.is_set():
            return False
        if self.config.requests_per_agent is not None and turn >= self.config.requests_per_agent:
            return False
        return self.deadline is None or time.monotonic() < self.deadline

    async def agent(self, client: httpx.AsyncClient, agent: int) -> None:
        report = self.reports[agent_name(agent)]
        turn = 0
        tool = random.Random(agent)
        while self._more(turn):
            await self._one(client, agent, turn, report)
            turn += 1
            low, high = self.config.tool_seconds
            if high and self._more(turn):
                await asyncio.sleep(tool.uniform(low, high))

    async def _one(self, client: httpx.AsyncClient, agent: int, turn: int, report: AgentReport) -> None:
        started = time.monotonic()
        first = None
        chunks = 0
        usage = None
        reply: list[str] = []
        follow_up = self._follow_up(agent)
        try:
            async with client.stream("POST", "/v1/chat/completions", json=self._body(agent, turn)) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    self._error(report, f"HTTP {resp.status_code}: {resp.text[:200]}")
                    await asyncio.sleep(float(resp.headers.get("retry-after", "0") or 0) or 0.05)
                    return
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if event.get("usage"):
                        usage = event["usage"]
                    for choice in event.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            reply.append(delta["content"])
                        if delta.get("content") or delta.get("tool_calls"):
                            # Counted as they arrive, so a request cut off at the deadline still counts.
                            chunks += 1
                            report.tokens += 1
                            if first is None:
                                first = time.monotonic()
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            self._error(report, f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(ERROR_BACKOFF_S)
            return
        report.requests += 1
        self._replied(agent, turn, "".join(reply))
        if usage:
            report.prompt_tokens += usage.get("prompt_tokens") or 0
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            report.cached_tokens += cached or 0
            if follow_up:
                report.follow_up_computed.append((usage.get("prompt_tokens") or 0) - (cached or 0))
        if usage:
            # A chunk may carry several tokens (held-back stop text); usage is exact.
            report.tokens += usage["completion_tokens"] - chunks
        report.latency.append(time.monotonic() - started)
        if first is not None:
            report.ttft.append(first - started)

    def _follow_up(self, agent: int) -> bool:
        """Whether the agent's next request continues a conversation (a failed request is no turn)."""
        if self.config.real_agents:
            return self._chat(agent).turn > 0
        return any(m["role"] == "assistant" for m in self.conversations.get(agent, ()))

    def _error(self, report: AgentReport, message: str) -> None:
        report.errors += 1
        if len(self.messages) < 20:
            self.messages.append(message)


async def run_swarm(config: SwarmConfig, stop: asyncio.Event | None = None,
                    on_round: Callable[[dict], None] | None = None) -> SwarmReport:
    """Runs the swarm; `on_round` hears each critical-path round as it ends."""
    if config.critical_path is not None:
        return await _run_critical_path(config, stop or asyncio.Event(), on_round)
    swarm = _Swarm(config, stop)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=config.agents + 4, max_keepalive_connections=config.agents + 4)
    started = time.monotonic()
    if config.seconds is not None:
        swarm.deadline = started + config.seconds
    async with httpx.AsyncClient(base_url=config.url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(config.timeout_s, connect=10.0)) as client:
        tasks = [asyncio.create_task(swarm.agent(client, a)) for a in range(config.agents)]
        try:
            if config.seconds is not None:
                # Requests still streaming at the deadline are cut off: the window is what is measured.
                await asyncio.wait(tasks, timeout=max(swarm.deadline - time.monotonic(), 0))
            else:
                await asyncio.gather(*tasks)
        finally:
            # Also when run_swarm itself is cancelled: each agent hangs up like a client going away.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    seconds = time.monotonic() - started
    return _report(config, swarm, seconds)


async def _run_critical_path(config: SwarmConfig, stop: asyncio.Event,
                             on_round: Callable[[dict], None] | None) -> SwarmReport:
    workload = config.critical_path
    bias = {str(t): -100 for t in config.eos_token_ids}
    runner = CriticalPathClient(workload, lambda turn: turn_body(turn, config.model, config.ignore_eos, bias), on_round)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    connections = workload.workers + workload.noisy_concurrency + 4
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    deadline = time.monotonic() + config.seconds if config.seconds is not None else None
    async with httpx.AsyncClient(base_url=config.url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(config.timeout_s, connect=10.0)) as client:
        figures = await runner.run(client, stop, deadline)
    latency = figures["latency"]
    fairness = figures["fairness"]
    turns = sum(f["turns"] for f in latency.values())
    return SwarmReport(
        agents=len(workload.agents), requests=turns, errors=figures["errors"], tokens=int(figures["tokens"]),
        seconds=figures["seconds"], tok_s=figures["tok_s"], ttft_p50=None, ttft_p95=None,
        latency_p50=None, latency_p95=None, error_messages=runner.messages,
        per_agent={agent: {"tokens": fairness["tokens"].get(agent, 0), "share": fairness["share"].get(agent),
                           "fair_ratio": fairness["fair_ratio"].get(agent), "turns": f["turns"],
                           "latency_p50": f["p50"], "latency_p95": f["p95"]}
                   for agent, f in latency.items()},
        critical_path=figures,
    )


def _report(config: SwarmConfig, swarm: _Swarm, seconds: float) -> SwarmReport:
    reports = swarm.reports
    ttft = [t for r in reports.values() for t in r.ttft]
    latency = [t for r in reports.values() for t in r.latency]
    tokens = sum(r.tokens for r in reports.values())
    follow_ups = [n for r in reports.values() for n in r.follow_up_computed]
    short_prompts = None
    if config.long_prompt_tokens:
        others = [r for name, r in reports.items() if name != agent_name(0)]
        short_ttft = [t for r in others for t in r.ttft]
        short_latency = [t for r in others for t in r.latency]
        short_prompts = {"ttft_p50": percentile(short_ttft, 50), "ttft_p95": percentile(short_ttft, 95),
                         "latency_p50": percentile(short_latency, 50), "latency_p95": percentile(short_latency, 95)}
    return SwarmReport(
        agents=config.agents,
        requests=sum(r.requests for r in reports.values()),
        errors=sum(r.errors for r in reports.values()),
        tokens=tokens,
        seconds=seconds,
        tok_s=tokens / seconds if seconds > 0 else 0.0,
        ttft_p50=percentile(ttft, 50),
        ttft_p95=percentile(ttft, 95),
        latency_p50=percentile(latency, 50),
        latency_p95=percentile(latency, 95),
        error_messages=swarm.messages,
        prompt_tokens=sum(r.prompt_tokens for r in reports.values()),
        cached_tokens=sum(r.cached_tokens for r in reports.values()),
        short_prompts=short_prompts,
        follow_up_computed_p50=percentile(follow_ups, 50),
        follow_up_computed_p95=percentile(follow_ups, 95),
        per_agent={
            name: {"requests": r.requests, "errors": r.errors, "tokens": r.tokens,
                   "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
                   "ttft_p50": percentile(r.ttft, 50), "latency_p50": percentile(r.latency, 50)}
            for name, r in sorted(reports.items())
        },
    )
