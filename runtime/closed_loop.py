"""An in-process closed-loop swarm: each agent sends its next request the moment its last returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from runtime.clock import RealClock, VirtualClock
from runtime.config import SchedulerConfig
from runtime.engine import Engine
from runtime.engine_loop import EngineLoop
from runtime.request import Request, RequestOutput, SamplingParams
from runtime.scheduler import Scheduler
from runtime.stats import StepStats
from runtime.workload import SwarmWorkload, agent_name, prompt_text

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

    def as_dict(self) -> dict:
        return asdict(self)


def text_prompt(engine: Engine, length: int) -> PromptMaker:
    """Exactly `length` tokens of the engine's own vocabulary, different per agent and turn."""

    def make(agent: int, turn: int) -> list[int]:
        ids = engine.tokenize(prompt_text(agent, turn, length))
        while len(ids) < length:
            ids += ids
        return ids[:length]

    return make


def run_closed_loop(
    engine: Engine,
    config: SchedulerConfig,
    workload: SwarmWorkload,
    clock: VirtualClock | RealClock,
    make_prompt: PromptMaker | None = None,
    on_stats: Callable[[StepStats], None] | None = None,
) -> RunResult:
    make_prompt = make_prompt or text_prompt(engine, workload.prompt_tokens)
    scheduler = Scheduler(
        config,
        kv_capacity=engine.kv_capacity,
        max_context=engine.max_context,
        max_step_tokens=engine.max_step_tokens,
        max_lanes=engine.max_lanes,
    )
    steps: list[StepStats] = []

    def record(stats: StepStats) -> None:
        steps.append(stats)
        if on_stats is not None:
            on_stats(stats)

    loop = EngineLoop(scheduler, engine, clock, on_stats=record)
    outcome = {"requests": 0, "errors": 0}

    def submit(agent: int, turn: int) -> None:
        request = Request(
            make_prompt(agent, turn),
            SamplingParams(max_tokens=workload.max_tokens(agent, turn), temperature=0.0, ignore_eos=True),
            agent=agent_name(agent),
        )

        def on_output(output: RequestOutput) -> None:
            if not output.finished:
                return
            outcome["requests"] += 1
            outcome["errors"] += output.error is not None
            if turn + 1 < workload.requests_per_agent:
                submit(agent, turn + 1)

        request.listener = on_output
        scheduler.add(request, clock.now())

    started = clock.now()
    for agent in range(workload.agents):
        submit(agent, 0)
    while scheduler.has_work:
        if loop.step() is None and scheduler.waiting and not scheduler.num_running:
            wake = scheduler.next_admission_time()
            if wake is None:
                raise RuntimeError("the swarm stalled: requests wait but none can ever be admitted")
            clock.wait_until(wake)
    seconds = clock.now() - started
    useful = sum(s.useful_tokens for s in steps)
    held = sum(s.width_held for s in steps)
    lane_slots = sum(s.max_batch for s in steps)
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
    )
