"""A swarm with a critical path: a coordinator and its workers, beside a noisy neighbour.

Each round the coordinator sends a planning turn, fans out one task to each of K workers, waits for
all of them, then sends a merge turn; the round's makespan runs from the plan's submission to the
merge's end. Worker tasks take the seed's spread of lengths (offset by round). The noisy neighbour
keeps `noisy_concurrency` requests open the whole time, as an agent that floods the server would.

`CriticalPathSwarm` is only the script (who sends what, when, and the figures per round); the
in-process runner (runtime.workloads.critical_path_run) and the HTTP load generator (app.loadgen.swarm) drive it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from swarm_panel.runtime.policies.fairness import ServiceLedger, fairness_figures
from swarm_panel.runtime.serving.metrics import percentile
from swarm_panel.runtime.workloads.workload import ARTICLE_LENGTHS

COORDINATOR = "coordinator"
NOISY = "noisy-neighbour"


def worker_name(index: int) -> str:
    return f"worker-{index + 1:02d}"


@dataclass(slots=True, frozen=True)
class CriticalPathWorkload:
    workers: int = 8
    rounds: int = 3
    worker_lengths: tuple[int, ...] = ARTICLE_LENGTHS
    plan_tokens: int = 150
    merge_tokens: int = 220
    noisy_concurrency: int = 24
    noisy_lengths: tuple[int, ...] = ARTICLE_LENGTHS
    prompt_tokens: int = 32

    def __post_init__(self) -> None:
        if self.workers < 1 or self.rounds < 1:
            raise ValueError("a critical-path swarm needs at least one worker and one round")
        if self.noisy_concurrency < 0:
            raise ValueError("noisy_concurrency must not be negative")
        for lengths in (self.worker_lengths, self.noisy_lengths):
            if not lengths or min(lengths) < 1:
                raise ValueError("lengths must be a non-empty list of positive token counts")
        if min(self.plan_tokens, self.merge_tokens, self.prompt_tokens) < 1:
            raise ValueError("plan, merge and prompt tokens must be positive")

    @property
    def agents(self) -> list[str]:
        return [COORDINATOR, *(worker_name(i) for i in range(self.workers)), NOISY]


@dataclass(slots=True, frozen=True)
class Turn:
    agent: str
    # A stable number for the agent (coordinator 0, workers 1..K, the noisy neighbour K+1), for prompts.
    agent_index: int
    kind: str  # "plan", "work", "merge" or "noise"
    round: int
    # The agent's own count of turns so far, for prompts that differ turn to turn.
    seq: int
    max_tokens: int
    prompt_tokens: int


@dataclass(slots=True)
class RoundRecord:
    index: int
    start: float
    end: float
    # Per agent, over the round: tokens served, share of them, service over the fair share, and Jain's index.
    fairness: dict = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return self.end - self.start

    def as_dict(self) -> dict:
        return {"round": self.index, "start": self.start, "end": self.end, "makespan": self.makespan,
                **self.fairness}


class CriticalPathSwarm:
    """`start()` and `finished(turn)` return the turns to send next; `served()` charges tokens as they arrive."""

    def __init__(self, workload: CriticalPathWorkload, lanes: int | None = None) -> None:
        self.workload = workload
        self.ledger = ServiceLedger(lanes)
        self.rounds: list[RoundRecord] = []
        self.latencies: dict[str, list[float]] = {agent: [] for agent in workload.agents}
        self.done = False
        self._seq = {agent: itertools.count() for agent in workload.agents}
        self._sent: dict[int, float] = {}
        self._open_work = 0
        self._round_start = 0.0
        self._round_mark = self.ledger.snapshot()

    # -- the script ----------------------------------------------------------------------------

    def start(self, now: float) -> list[Turn]:
        return [self._plan(0, now), *(self._noise(now) for _ in range(self.workload.noisy_concurrency))]

    def finished(self, turn: Turn, now: float, ok: bool = True) -> list[Turn]:
        """The turn ended (`ok` false: it failed, and the script sends it again)."""
        self.ledger.closed(turn.agent)
        started = self._sent.pop(id(turn), now)
        if ok:
            self.latencies[turn.agent].append(now - started)
        if self.done:
            return []
        if not ok:
            return [self._again(turn, now)]
        w = self.workload
        if turn.kind == "noise":
            return [self._noise(now)]
        if turn.kind == "plan":
            self._open_work = w.workers
            return [self._turn(worker_name(i), i + 1, "work", turn.round,
                               w.worker_lengths[(i + turn.round) % len(w.worker_lengths)], now)
                    for i in range(w.workers)]
        if turn.kind == "work":
            self._open_work -= 1
            return [self._turn(COORDINATOR, 0, "merge", turn.round, w.merge_tokens, now)] if not self._open_work else []
        self._end_round(turn.round, now)
        if turn.round + 1 < w.rounds:
            return [self._plan(turn.round + 1, now)]
        self.done = True
        return []

    def served(self, agent: str, tokens: int = 1) -> None:
        self.ledger.served(agent, tokens)

    def _plan(self, round_index: int, now: float) -> Turn:
        self._round_start = now
        self._round_mark = self.ledger.snapshot()
        return self._turn(COORDINATOR, 0, "plan", round_index, self.workload.plan_tokens, now)

    def _noise(self, now: float) -> Turn:
        w = self.workload
        seq = next(self._seq[NOISY])
        return self._make(Turn(NOISY, w.workers + 1, "noise", len(self.rounds), seq,
                               w.noisy_lengths[seq % len(w.noisy_lengths)], w.prompt_tokens), now)

    def _turn(self, agent: str, index: int, kind: str, round_index: int, max_tokens: int, now: float) -> Turn:
        return self._make(Turn(agent, index, kind, round_index, next(self._seq[agent]), max_tokens,
                               self.workload.prompt_tokens), now)

    def _again(self, turn: Turn, now: float) -> Turn:
        return self._make(Turn(turn.agent, turn.agent_index, turn.kind, turn.round, next(self._seq[turn.agent]),
                               turn.max_tokens, turn.prompt_tokens), now)

    def _make(self, turn: Turn, now: float) -> Turn:
        self._sent[id(turn)] = now
        self.ledger.opened(turn.agent)
        return turn

    def _end_round(self, index: int, now: float) -> None:
        served0, fair0 = self._round_mark
        served, fair = self.ledger.snapshot()
        served.subtract(served0)
        fair.subtract(fair0)
        self.rounds.append(RoundRecord(index, self._round_start, now, fairness_figures(served, fair)))

    # -- the figures ---------------------------------------------------------------------------

    def latency_figures(self) -> dict[str, dict[str, float | None]]:
        return {agent: {"turns": len(xs), "p50": percentile(xs, 50), "p95": percentile(xs, 95)}
                for agent, xs in self.latencies.items()}

    def others_latency_p95(self) -> float | None:
        """Turn latency p95 over every agent but the noisy neighbour."""
        return percentile([x for agent, xs in self.latencies.items() if agent != NOISY for x in xs], 95)
