"""An in-process closed-loop swarm: each agent sends its next request the moment its last returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import Engine, RealClock, VirtualClock
from swarm_panel.runtime.core.request import Request, RequestOutput, RequestStatus, SamplingParams
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.serving.metrics import percentile
from swarm_panel.runtime.workloads.agent_script import REPEAT_PENALTY, AgentConversation
from swarm_panel.runtime.workloads.workload import SwarmWorkload, agent_name, prompt_text, system_text, tool_text

PromptMaker = Callable[[int, int], list[int]]


@dataclass(slots=True)
class RunResult:
    policy: str
    useful_tokens: int
    steps: int
    utilization: float
    tok_s: float
    seconds: float
    occupancy: float
    padding_rows: int
    prefill_tokens: int
    requests: int
    errors: int
    # Prompt tokens submitted (prefill_tokens is what was computed of them, recomputation included).
    prompt_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prefix_cache: bool = False
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    ttft_mean: float | None = None
    kv_cached_peak: int = 0
    # Recurrent-state checkpoints a hybrid model's engine held (0 for attention models).
    checkpoints_peak: int = 0
    checkpoint_bytes_peak: int = 0
    # Output lengths as the requests ended, and how many ended on the model's own stop.
    length_min: int = 0
    length_p50: float | None = None
    length_max: int = 0
    natural_stops: int = 0
    # Where the steps' time went (runtime.serving.metrics.StepTotals.as_dict); empty on a virtual clock.
    step_times: dict = field(default_factory=dict)

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def exact_tokens(engine: Engine, text: str, length: int, add_special: bool = True) -> list[int]:
    """The text's tokens, repeated or cut to exactly `length`."""
    ids = engine.tokenizer.tokenize(text, add_special=add_special)
    if not ids:
        ids = engine.tokenizer.tokenize(".", add_special=False)
    while len(ids) < length:
        ids += ids
    return ids[:length]


def text_prompt(engine: Engine, length: int) -> PromptMaker:
    """Exactly `length` tokens of the engine's own vocabulary, different per agent and turn."""

    def make(agent: int, turn: int) -> list[int]:
        return exact_tokens(engine, prompt_text(agent, turn, length), length)

    return make


class Conversations:
    """Each agent's token history: system prompt, task, then reply and tool result for every turn."""

    def __init__(self, engine: Engine, workload: SwarmWorkload) -> None:
        self.engine = engine
        self.workload = workload
        self.system = exact_tokens(engine, system_text(workload.system_tokens), workload.system_tokens)
        self.history: dict[int, list[int]] = {}

    def prompt(self, agent: int, turn: int) -> list[int]:
        w = self.workload
        if agent not in self.history:
            task = prompt_text(agent, 0, w.prompt_tokens)
            self.history[agent] = exact_tokens(self.engine, task, w.prompt_tokens, add_special=not self.system)
        return self.system + self.history[agent]

    def reply(self, agent: int, turn: int, output_token_ids: list[int]) -> None:
        tool = exact_tokens(self.engine, tool_text(agent, turn, self.workload.tool_tokens),
                            self.workload.tool_tokens, add_special=False)
        self.history[agent] += output_token_ids + tool


class ChatConversations:
    """Real agents: chat messages rendered with the model's own template, replies as the model wrote them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.chats: dict[int, AgentConversation] = {}

    def prompt(self, agent: int, turn: int) -> list[int]:
        chat = self.chats.setdefault(agent, AgentConversation(agent))
        # As the HTTP server renders a chat request, so in-process and HTTP runs compute the same prompts.
        tokenizer = self.engine.tokenizer
        return tokenizer.tokenize(tokenizer.apply_chat_template(chat.messages), add_special=True,
                                    parse_special=True)

    def reply(self, agent: int, turn: int, output_token_ids: list[int]) -> None:
        self.chats[agent].replied(self.engine.tokenizer.detokenize(output_token_ids))


def _sampling(workload: SwarmWorkload, agent: int, turn: int) -> SamplingParams:
    if workload.real_agents:
        return SamplingParams(max_tokens=workload.reply_tokens, temperature=0.0, repeat_penalty=REPEAT_PENALTY)
    return SamplingParams(max_tokens=workload.max_tokens(agent, turn), temperature=0.0, ignore_eos=True)


def run_closed_loop(
    engine: Engine,
    config: SchedulerConfig,
    workload: SwarmWorkload,
    clock: VirtualClock | RealClock,
    make_prompt: PromptMaker | None = None,
    on_stats: Callable[[StepStats], None] | None = None,
) -> RunResult:
    if workload.real_agents:
        conversations = ChatConversations(engine)
    else:
        conversations = Conversations(engine, workload) if workload.conversation else None
    if conversations is not None:
        make_prompt = conversations.prompt
    else:
        make_prompt = make_prompt or text_prompt(engine, workload.prompt_tokens)
        if workload.system_tokens:
            system = exact_tokens(engine, system_text(workload.system_tokens), workload.system_tokens)
            per_agent = make_prompt
            make_prompt = lambda agent, turn: system + per_agent(agent, turn)  # noqa: E731
    scheduler = Scheduler.for_engine(config, engine)
    steps: list[StepStats] = []

    def record(stats: StepStats) -> None:
        steps.append(stats)
        if on_stats is not None:
            on_stats(stats)

    loop = EngineCore(scheduler, engine, clock, on_stats=record)
    # Where the shared system prompt ends: a hybrid model keeps its recurrent state there for every agent.
    system_boundary = (workload.system_tokens,) if workload.system_tokens and not workload.real_agents else ()
    outcome = {"requests": 0, "errors": 0, "prompt_tokens": 0, "stops": 0}
    lengths: list[int] = []

    def submit(agent: int, turn: int) -> None:
        prompt = make_prompt(agent, turn)
        outcome["prompt_tokens"] += len(prompt)
        request = Request(prompt, _sampling(workload, agent, turn), agent=agent_name(agent),
                          checkpoint_positions=system_boundary)

        def on_output(output: RequestOutput) -> None:
            if not output.finished:
                return
            outcome["requests"] += 1
            outcome["errors"] += output.error is not None
            outcome["stops"] += request.status is RequestStatus.FINISHED_STOPPED
            lengths.append(request.num_output_tokens)
            if conversations is not None:
                conversations.reply(agent, turn, request.output_token_ids)
            if turn + 1 < workload.requests_per_agent:
                submit(agent, turn + 1)

        request.listener = on_output
        scheduler.add(request, clock.now())

    started = clock.now()
    for agent in range(workload.agents):
        submit(agent, 0)
    # A loop that overlaps holds a step's outputs until the next computes: the last ones come out in flush.
    while scheduler.has_work or loop.flush():
        if loop.step() is None and scheduler.waiting and not scheduler.num_running:
            wake = scheduler.next_admission_time()
            if wake is None:
                raise RuntimeError("the swarm stalled: requests wait but none can ever be admitted")
            idle_from = clock.now()
            clock.wait_until(wake)
            loop.account.add_idle(clock.now() - idle_from)
    seconds = clock.now() - started
    times = loop.account.totals()
    # The next run on this engine must start clean: cached sequences would stay in its KV and slow it.
    scheduler.drop_prefix_cache()
    loop.step()
    useful = sum(s.useful_tokens for s in steps)
    held = sum(s.width_held for s in steps)
    lane_slots = sum(s.num_lanes for s in steps)
    ttft = [seconds for s in steps for _, seconds in s.ttft]
    return RunResult(
        policy=config.policy,
        useful_tokens=useful,
        steps=len(steps),
        utilization=sum(s.useful_rows for s in steps) / held if held else 0.0,
        tok_s=useful / seconds if seconds > 0 else 0.0,
        seconds=seconds,
        occupancy=sum(s.live_lanes for s in steps) / lane_slots if lane_slots else 0.0,
        padding_rows=sum(s.padding_lanes for s in steps),
        prefill_tokens=sum(s.prefill_tokens for s in steps),
        requests=outcome["requests"],
        errors=outcome["errors"],
        prompt_tokens=outcome["prompt_tokens"],
        prefix_queries=sum(s.prefix_queries for s in steps),
        prefix_hits=sum(s.prefix_hits for s in steps),
        prefix_cache=scheduler.reuse_enabled,
        ttft_p50=percentile(ttft, 50),
        ttft_p95=percentile(ttft, 95),
        ttft_mean=sum(ttft) / len(ttft) if ttft else None,
        kv_cached_peak=max((s.kv_cached for s in steps), default=0),
        checkpoints_peak=max((s.checkpoints for s in steps), default=0),
        checkpoint_bytes_peak=max((s.checkpoint_bytes for s in steps), default=0),
        length_min=min(lengths, default=0),
        length_p50=percentile(lengths, 50),
        length_max=max(lengths, default=0),
        natural_stops=outcome["stops"],
        step_times=times.as_dict() if isinstance(clock, RealClock) else {},
    )
