"""Overlap: a step's figures and outputs go out while the engine computes the next step. The tokens, every
request's outputs and their order are the same as without it, on both architectures; nothing stays held
when the loop runs dry, and an abort's output comes after the request's held ones."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.llama.engine import LlamaEngine
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore

PROMPTS = ["the agent can call a tool", "hello world", "what is this", "we will do it", "how are you"]


class Watched:
    """The engine, noting whether a delivery happens inside its step (while it computes)."""

    def __init__(self, engine: LlamaEngine) -> None:
        self.engine = engine
        self.inside = False

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, plan):
        self.inside = True
        try:
            return self.engine.step(plan)
        finally:
            self.inside = False


def run(engine: LlamaEngine, overlap: bool, sampling: list[SamplingParams]):
    watched = Watched(engine)
    loop = EngineCore(Scheduler.for_engine(SchedulerConfig(policy="continuous", num_lanes=4, prefill_chunk=8),
                                           engine), watched, RealClock(), overlap=overlap)
    seen: dict[int, list[tuple[list[int], bool, bool]]] = {}
    stats_inside = []
    loop.on_stats = lambda stats: stats_inside.append(watched.inside)
    requests = []
    for prompt, s in zip(PROMPTS, sampling):
        request = Request(engine.tokenizer.tokenize(prompt), s)
        log = seen.setdefault(request.request_id, [])
        request.listener = (lambda out, log=log: log.append((list(out.token_ids), out.finished, watched.inside)))
        requests.append(request)
        loop.scheduler.add(request, loop.clock.now())
    while loop.scheduler.has_work or loop.flush():
        loop.step()
    return requests, seen, stats_inside


def test_held_outputs_go_out_while_the_next_step_computes_and_change_nothing(arch_model_path):
    sampling = [SamplingParams(max_tokens=6 + 3 * i, temperature=0.0, ignore_eos=True) for i in range(len(PROMPTS))]
    with LlamaEngine(arch_model_path, max_lanes=4, n_ctx=1024) as engine:
        plain_requests, plain, _ = run(engine, False, sampling)
        held_requests, held, stats_inside = run(engine, True, sampling)
    assert [r.output_token_ids for r in held_requests] == [r.output_token_ids for r in plain_requests]
    strip = lambda logs: [[(tokens, finished) for tokens, finished, _ in log] for log in logs.values()]  # noqa: E731
    assert strip(held) == strip(plain)
    # Without overlap every output goes out between steps; with it, all but the last step's go out while
    # the next step computes (five requests on four lanes: the last one finishes alone).
    assert not any(inside for log in plain.values() for _, _, inside in log)
    inside = [i for log in held.values() for _, _, i in log]
    assert sum(inside) >= len(inside) - 2 and stats_inside.count(True) >= len(stats_inside) - 2
    assert all(log[-1][1] for log in held.values())


def test_an_abort_comes_after_the_outputs_held_for_the_request(tiny_model_path):
    with LlamaEngine(tiny_model_path, max_lanes=2, n_ctx=1024) as engine:
        loop = EngineCore(Scheduler.for_engine(SchedulerConfig(num_lanes=2), engine), engine, RealClock(),
                          overlap=True)
        got = []
        request = Request(engine.tokenizer.tokenize("hello world"), SamplingParams(max_tokens=50, temperature=0.0,
                                                                         ignore_eos=True))
        request.listener = got.append
        loop.scheduler.add(request, loop.clock.now())
        for _ in range(3):
            loop.step()
        held = len(got)
        loop.deliver(loop.scheduler.abort(request.request_id, loop.clock.now()))
        assert len(got) > held + 1, "the held step's output, then the abort's"
        assert [o.finished for o in got] == [False] * (len(got) - 1) + [True]
        assert sum(len(o.token_ids) for o in got) == request.num_output_tokens


@pytest.mark.parametrize("overlap", [False, True])
def test_the_closed_loop_swarm_finishes_either_way(tiny_model_path, overlap, monkeypatch):
    from swarm_panel.runtime.serving import engine_core
    from swarm_panel.runtime.workloads.closed_loop import run_closed_loop
    from swarm_panel.runtime.workloads.workload import SwarmWorkload

    original = engine_core.EngineCore.__init__
    monkeypatch.setattr(engine_core.EngineCore, "__init__",
                        lambda self, *a, **k: original(self, *a, **{**k, "overlap": overlap}))
    workload = SwarmWorkload(agents=3, lengths=(5, 9), requests_per_agent=3, prompt_tokens=8)
    with LlamaEngine(tiny_model_path, max_lanes=3, n_ctx=1024) as engine:
        result = run_closed_loop(engine, SchedulerConfig(num_lanes=3), workload, RealClock())
    assert result.requests == 9 and result.errors == 0
