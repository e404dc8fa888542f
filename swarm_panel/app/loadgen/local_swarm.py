"""A closed-loop swarm that submits runtime Requests straight to an EngineThread; no Qt, no HTTP.

Tests and the overhead benchmark use it to load the engine without a server; the panel's launcher
drives the HTTP endpoint instead (app.loadgen.swarm), like external agents do.
"""

from __future__ import annotations

import threading

from swarm_panel.runtime.core.request import Request, RequestOutput, SamplingParams
from swarm_panel.runtime.serving.engine_core import EngineThread, EngineUnavailable
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS, SwarmWorkload, agent_name


class LocalSwarm:
    def __init__(self, engine_thread: EngineThread, agents: int = 8, lengths: tuple[int, ...] = ARTICLE_LENGTHS,
                 spread: float = 1.0, prompt_tokens: int = 32) -> None:
        self.engine_thread = engine_thread
        self.workload = SwarmWorkload(agents=agents, lengths=tuple(lengths), spread=spread,
                                      prompt_tokens=prompt_tokens)
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.requests = 0
        self.errors = 0
        self.tokens = 0

    def start(self) -> None:
        for agent in range(self.workload.agents):
            self._submit(agent, 0)

    def stop(self) -> None:
        self._stopped.set()

    @property
    def running(self) -> bool:
        return not self._stopped.is_set()

    def _submit(self, agent: int, turn: int) -> None:
        if self._stopped.is_set():
            return
        prompt = [10 + (agent * 31 + turn * 7 + i) % 200 for i in range(self.workload.prompt_tokens)]
        max_tokens = self.workload.max_tokens(agent, turn)
        request = Request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
                          agent=agent_name(agent))

        def on_output(output: RequestOutput) -> None:
            if not output.finished:
                return
            with self._lock:
                self.requests += 1
                self.errors += output.error is not None
                self.tokens += request.num_output_tokens
            self._submit(agent, turn + 1)

        request.listener = on_output
        try:
            self.engine_thread.submit(request)
        except EngineUnavailable:
            self._stopped.set()
