"""Small builders shared by the runtime tests."""

from __future__ import annotations

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import EngineCaps, VirtualClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.core.stats import StepStats
from swarm_panel.runtime.modeled.engine import ModeledEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore


class Harness:
    """A scheduler driving the modeled engine on a virtual clock, recording every step."""

    def __init__(self, **config) -> None:
        self.engine = ModeledEngine()
        kv_capacity = config.pop("kv_capacity", self.engine.kv_capacity)
        # As a CPU engine says: a prompt chunk's cost grows with its depth.
        attention_bound = config.pop("attention_bound", False)
        self.scheduler = Scheduler(
            SchedulerConfig(**config),
            EngineCaps(kv_capacity=kv_capacity, max_context=self.engine.max_context,
                       max_step_tokens=self.engine.max_step_tokens, attention_bound_prefill=attention_bound),
        )
        self.clock = VirtualClock()
        self.steps: list[StepStats] = []
        self.outputs: dict[int, list] = {}
        self.loop = EngineCore(self.scheduler, self.engine, self.clock, on_stats=self.steps.append)

    def add(self, max_tokens: int, prompt: int = 8, agent: str = "a") -> Request:
        request = Request([5] * prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), agent=agent)
        self.outputs[request.request_id] = []
        request.listener = self.outputs[request.request_id].append
        self.scheduler.add(request, self.clock.now())
        return request

    def step(self) -> StepStats | None:
        return self.loop.step()

    def run(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_work:
                return
            if self.step() is None and self.scheduler.waiting and not self.scheduler.num_running:
                self.clock.wait_until(self.scheduler.next_admission_time())
        raise AssertionError("did not finish")

    def abort(self, request: Request) -> list[Request]:
        """Aborts through the scheduler and tells the listeners; returns the requests it ended."""
        outputs = self.scheduler.abort(request.request_id, self.clock.now())
        self.loop.deliver(outputs)
        return [request for request, _ in outputs]

    def reconfigure(self, **changes) -> None:
        self.loop.deliver(self.scheduler.reconfigure(self.scheduler.config.with_changes(**changes), self.clock.now()))
