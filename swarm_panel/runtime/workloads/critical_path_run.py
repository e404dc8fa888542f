"""The critical-path swarm in-process: the script of runtime.workloads.critical_path on a scheduler and an engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import Engine, RealClock, VirtualClock
from swarm_panel.runtime.core.request import Request, RequestOutput, SamplingParams
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.policies.fairness import fairness_figures
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore
from swarm_panel.runtime.workloads.closed_loop import text_prompt
from swarm_panel.runtime.workloads.critical_path import NOISY, CriticalPathSwarm, CriticalPathWorkload, Turn

_ENDED_WELL = ("stop", "length")


@dataclass(slots=True)
class CriticalPathResult:
    policy: str
    seconds: float
    tokens: int
    tok_s: float
    steps: int
    rounds: list[dict]
    makespan_mean: float
    # Over the whole run: per agent tokens, share, service over fair share; Jain's index over agents.
    fairness: dict
    latency: dict[str, dict]
    others_latency_p95: float | None
    preemptions: int

    @property
    def noisy_share(self) -> float:
        return self.fairness["share"].get(NOISY, 0.0)

    @property
    def noisy_fair_ratio(self) -> float | None:
        return self.fairness["fair_ratio"].get(NOISY)

    def as_dict(self) -> dict:
        return asdict(self) | {"noisy_share": self.noisy_share, "noisy_fair_ratio": self.noisy_fair_ratio}


def run_critical_path(
    engine: Engine,
    config: SchedulerConfig,
    workload: CriticalPathWorkload,
    clock: VirtualClock | RealClock,
    on_stats: Callable[[StepStats], None] | None = None,
    scheduler: Scheduler | None = None,
) -> CriticalPathResult:
    """Runs every round; the noisy neighbour's requests still open when the last merge ends are aborted."""
    scheduler = scheduler or Scheduler.for_engine(config, engine)
    steps: list[StepStats] = []

    def record(stats: StepStats) -> None:
        steps.append(stats)
        if on_stats is not None:
            on_stats(stats)

    loop = EngineCore(scheduler, engine, clock, on_stats=record)
    swarm = CriticalPathSwarm(workload, lanes=config.num_lanes)
    make_prompt = text_prompt(engine, workload.prompt_tokens)
    open_requests: dict[int, Request] = {}
    preemptions = 0

    def send(turn: Turn) -> None:
        request = Request(make_prompt(turn.agent_index, turn.seq),
                          SamplingParams(max_tokens=turn.max_tokens, temperature=0.0, ignore_eos=True),
                          agent=turn.agent)

        def on_output(output: RequestOutput) -> None:
            nonlocal preemptions
            if output.token_ids:
                swarm.served(turn.agent, len(output.token_ids))
            if not output.finished:
                return
            open_requests.pop(request.request_id, None)
            preemptions += request.num_preemptions
            for following in swarm.finished(turn, clock.now(), ok=output.finish_reason in _ENDED_WELL):
                send(following)

        request.listener = on_output
        open_requests[request.request_id] = request
        scheduler.add(request, clock.now())

    started = clock.now()
    for turn in swarm.start(started):
        send(turn)
    while not swarm.done:
        if loop.step() is None and scheduler.waiting and not scheduler.num_running:
            wake = scheduler.next_admission_time()
            if wake is None:
                raise RuntimeError("the swarm stalled: requests wait but none can ever be admitted")
            clock.wait_until(wake)
    seconds = clock.now() - started
    for request_id in list(open_requests):
        loop.deliver(scheduler.abort(request_id, clock.now()))
    # The next run on this engine must start clean.
    scheduler.drop_prefix_cache()
    while scheduler.has_work and loop.step() is not None:
        pass
    loop.flush()
    served, fair = swarm.ledger.snapshot()
    tokens = int(sum(served.values()))
    rounds = [r.as_dict() for r in swarm.rounds]
    return CriticalPathResult(
        policy=config.policy,
        seconds=seconds,
        tokens=tokens,
        tok_s=tokens / seconds if seconds > 0 else 0.0,
        steps=len(steps),
        rounds=rounds,
        makespan_mean=sum(r["makespan"] for r in rounds) / len(rounds),
        fairness=fairness_figures(served, fair),
        latency=swarm.latency_figures(),
        others_latency_p95=swarm.others_latency_p95(),
        preemptions=preemptions,
    )
