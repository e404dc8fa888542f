"""Which attention kernel the contexts being served want, and when switching to it pays.

On a CPU the two kernels cross: flash attention makes a decode step over short contexts cheaper and
over long ones much dearer (an Ice Lake Xeon, the demo model, 8 lanes: 40 against 46 ms at 150
tokens, 123 against 77 ms at 1,200; benchmarks/attention_by_context.py). The probe
(runtime.llama.cpu_tuning.flash_attn_probe) picks one kernel at load from a short context, and llama.cpp fixes it
per context, so agents whose conversations sit far from that point pay for the other kernel's
strengths. `AttentionCurve` holds the probe's decode step of 8 lanes at a short and a long context
for each kernel; `AttentionFollower` prices what the live lanes hold under both and advises a
switch where the other kernel is clearly cheaper and the recompute it costs pays back.

A switch is a new context (runtime.llama.engine.switch_attention): the live requests recompute and
the cached prefixes are gone, so it pays back over the time still to serve, which nobody knows; the
follower takes it to be as long as this kernel has served so far (at least `min_horizon_s`). At a
swarm's start little is computed and the switch is nearly free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SETTINGS = ("on", "off")


def other(setting: str) -> str:
    return "off" if setting == "on" else "on"


def distinct_tokens(sequences: Sequence[Sequence[int] | np.ndarray]) -> int:
    """The tokens a recompute of these sequences computes: every prefix they share is computed once
    (the scheduler copies it into the others), so the size of their token trie, taken as each
    sequence less its longest common prefix with its neighbour in sorted order."""
    ordered = sorted(tuple(int(t) for t in seq) for seq in sequences)
    total = 0
    for previous, current in zip([()] + ordered, ordered):
        shared = 0
        for a, b in zip(previous, current):
            if a != b:
                break
            shared += 1
        total += len(current) - shared
    return total


@dataclass(frozen=True, slots=True)
class AttentionCurve:
    """A decode step of `lanes` lanes, in seconds, at two contexts, for flash attention on and off;
    and a prompt token's seconds in a chunk, (on, off)."""

    contexts: tuple[int, int]
    on: tuple[float, float]
    off: tuple[float, float]
    prompt_token: tuple[float, float]
    lanes: int = 8

    def row_s(self, setting: str, context: int) -> float:
        """One decode row's share of a full step whose lanes hold `context` tokens (a line through
        the two points, not below a tenth of the short context's cost)."""
        (c0, c1), (t0, t1) = self.contexts, getattr(self, setting)
        step = t0 + (t1 - t0) * (context - c0) / (c1 - c0)
        return max(step, 0.1 * t0) / self.lanes

    def prompt_token_s(self, setting: str) -> float:
        return self.prompt_token[SETTINGS.index(setting)]

    def as_dict(self) -> dict:
        return {"contexts": list(self.contexts), "on": list(self.on), "off": list(self.off),
                "prompt_token": list(self.prompt_token), "lanes": self.lanes}

    @classmethod
    def from_dict(cls, data: dict) -> AttentionCurve:
        return cls(tuple(data["contexts"]), tuple(data["on"]), tuple(data["off"]), tuple(data["prompt_token"]),
                   int(data["lanes"]))


class AttentionFollower:
    """Prices the live lanes' contexts under both kernels, step by step, in decayed sums, and says
    when the other kernel is worth a switch.

    A lane counts at what its decode rows attend over: its prompt and output so far, so a lane still
    computing its prompt counts before its KV exists, which is what makes a swarm's first switch free."""

    def __init__(self, curve: AttentionCurve, current: str, *, margin: float = 0.85, half_life_rows: float = 256.0,
                 min_rows: int = 8, cooldown_s: float = 60.0, min_horizon_s: float = 30.0) -> None:
        if current not in SETTINGS:
            raise ValueError(f"the kernel must be 'on' or 'off', got {current!r}")
        self.curve = curve
        self.current = current
        self.margin = margin
        self.min_rows = min_rows
        self.cooldown_s = cooldown_s
        self.min_horizon_s = min_horizon_s
        self._decay = 0.5 ** (1.0 / half_life_rows)
        self._cost = {"on": 0.0, "off": 0.0}
        self._rows = 0
        self._since: float | None = None
        self._switched_once = False
        self._next_costing = float("-inf")

    def observe(self, contexts: Iterable[int], now: float) -> None:
        """One step's live lanes, by the tokens each attends over."""
        if self._since is None:
            self._since = now
        for context in contexts:
            for setting in SETTINGS:
                self._cost[setting] = self._cost[setting] * self._decay + self.curve.row_s(setting, context)
            self._rows += 1

    @property
    def ratio(self) -> float | None:
        """The other kernel's cost over this one's, for the contexts served lately."""
        if self._rows < self.min_rows or self._cost[self.current] <= 0:
            return None
        return self._cost[other(self.current)] / self._cost[self.current]

    # What a switch recomputes: the tokens of the live and cached sequences, shared prefixes once.
    distinct_tokens = staticmethod(distinct_tokens)

    def advice(self, now: float, recompute_tokens: Callable[[], int]) -> str | None:
        """The kernel to switch to, or None: the other one must be `margin` cheaper for the contexts
        served lately, this one must have served `cooldown_s` since a switch, and what the switch
        recomputes (`recompute_tokens()`, asked only then, at the other kernel's prompt-token price)
        must pay back within as long as this kernel has served."""
        ratio = self.ratio
        if ratio is None or ratio >= self.margin or self._since is None:
            return None
        served = now - self._since
        if served < self.cooldown_s and self._switched_once:
            return None
        if now < self._next_costing:
            return None
        # Costing walks every live and cached sequence's tokens: at most once a second.
        self._next_costing = now + 1.0
        target = other(self.current)
        cost = recompute_tokens() * self.curve.prompt_token_s(target)
        if cost > (1.0 - ratio) * max(served, self.min_horizon_s):
            return None
        return target

    def switched(self, setting: str, now: float) -> None:
        """The engine now runs `setting`: the sums start again, and so does the cooldown."""
        self.current = setting
        self._cost = {"on": 0.0, "off": 0.0}
        self._rows = 0
        self._since = now
        self._switched_once = True
