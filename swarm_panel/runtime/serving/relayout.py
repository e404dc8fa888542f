"""When the engine changes its KV layout between steps, and the change itself (Engine.relayout).

Three reasons, each decided here on the engine thread: a request that fits only in a unified pool
has a split layout widen first; a widened layout turns split again once nothing has needed more than a
lane's share for a while; and on a CPU the attention kernel follows the contexts served lately
(runtime.llama.cpu_tuning.followers.AttentionFollower). Every change drops the engine's sequences: a new
scheduler sized by the new caps takes over every request, the live ones recomputing.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import TYPE_CHECKING

from swarm_panel.runtime.core.engine import EngineError, RelayoutKind
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.scheduling.lanes import Settled, unfit
from swarm_panel.runtime.scheduling.scheduler import Scheduler

if TYPE_CHECKING:
    from swarm_panel.runtime.serving.engine_core import EngineThread

log = logging.getLogger(__name__)

# A widened KV layout turns split again after this long with no request that needs more than a lane:
# about the gap an agent leaves between turns (a coding agent resends its long prompt every turn), as
# hosted APIs keep a prompt cache warm for five minutes.
NARROW_AFTER_S = 300.0


class Relayouts:
    def __init__(self, thread: EngineThread, narrow_after_s: float | None) -> None:
        self.thread = thread
        # None: a widened layout stays unified.
        self.narrow_after_s = narrow_after_s
        # Clock time a request that needs more than a lane's share was last seen (arriving, queued or live).
        self.long_seen = 0.0
        # Why the engine could not widen its KV layout, once it tried and could not.
        self._widen_failure: str | None = None
        # Where the engine can say which attention kernel serves the contexts seen lately, the kernel
        # follows them (the llama engine's CPU tuning; other engines have none).
        self.attention = thread.engine.caps.attention

    def unfit_since(self, request: Request, settled: Settled) -> str | None:
        """Why an admitted request no longer fits, where the layout or the budget changed since its
        admission (a narrowing in between widens again first); None when it fits."""
        thread = self.thread
        caps, total = thread.scheduler.caps, request.num_prompt_tokens + request.sampling.max_tokens
        if caps.widens_to and total > caps.max_context:
            self.widen(f"a request of {total:,} tokens")
        s = thread.scheduler
        if not settled.widens and (s.caps, s.kv_budget) == (settled.caps, settled.kv_budget):
            return None
        return unfit(request.num_prompt_tokens, request.sampling.max_tokens, s.caps, s.kv_budget)

    def widen(self, why: str) -> str | None:
        """The engine turns its KV layout unified; later requests find it done. Returns why it could
        not, or None."""
        if not self.thread.scheduler.caps.widens_to:
            return self._widen_failure
        self.long_seen = self.thread.clock.now()
        self._widen_failure = self._relayout(RelayoutKind.WIDEN, why)
        return self._widen_failure

    def narrow_when_quiet(self) -> None:
        """A widened layout turns split again once no request has needed more than a lane's share for
        narrow_after_s: in unified KV every live token's attention walks every sequence's cells."""
        s = self.thread.scheduler
        share = s.caps.narrows_to
        if not share or self.narrow_after_s is None:
            return
        now = self.thread.clock.now()
        if now - self.long_seen < self.narrow_after_s:
            return
        if any(r.num_prompt_tokens + r.sampling.max_tokens > share
               for r in chain((lane.request for lane in s.lanes.live()), s.waiting)):
            self.long_seen = now
            return
        self._relayout(RelayoutKind.NARROW, f"after {self.narrow_after_s:g} s with no request longer than a lane")

    def follow_attention(self) -> None:
        """Prices the live lanes' contexts under both attention kernels and switches to the other one
        where the follower says it pays; split layouts only (the curve was timed in one)."""
        follower, s = self.attention, self.thread.scheduler
        if follower is None or not s.caps.consecutive_ids:
            return
        now = self.thread.clock.now()
        live = [lane.request for lane in s.lanes.live()]
        follower.observe((request.num_tokens for request in live), now)
        target = follower.advice(now, lambda: follower.distinct_tokens(
            [r.token_ids[:r.num_computed_tokens] for r in live] + [entry.tokens for entry in s.prefix.cache]))
        if target is None:
            return
        why = (f"for the contexts served lately: a decode step {follower.ratio:.0%} of the cost it had "
               f"with flash attention {follower.current}")
        log.info("flash attention %s %s", target, why)
        if self._relayout(RelayoutKind.ATTENTION, why, target) is None:
            follower.switched(target, now)
        else:
            self.attention = None

    def _relayout(self, kind: RelayoutKind, why: str, flash_attn: str | None = None) -> str | None:
        """The engine changes its context, dropping every sequence; a new scheduler takes over. Returns
        why the engine could not change, or None."""
        thread = self.thread
        old = thread.scheduler
        failure = None
        try:
            thread.engine.relayout(kind, why, flash_attn)
        except EngineError as exc:
            # The old layout is back: requests are sized by it as before.
            log.error("%s", exc)
            failure = str(exc)
        except Exception as exc:  # no context at all: the steps fail their requests, as a broken engine's do
            log.exception("the engine broke while changing its KV layout")
            failure = f"the engine broke while changing its KV layout: {exc}"
        live = old.num_running
        scheduler = thread.replace_scheduler(Scheduler.for_engine(old.config, thread.engine))
        log.info("the new context took over %d live requests (recomputing) and %d waiting", live,
                 len(scheduler.waiting) - live)
        return failure
