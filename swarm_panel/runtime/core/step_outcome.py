"""What a scheduler call hands back: the outputs its listeners must hear and, for a step, its record.

Nothing is stashed for later: update() returns a StepOutcome, and the calls that end requests
between steps (abort, reconfigure, fail_unqueued, handle_kv_full) return their deliveries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm_panel.runtime.core.request import Request, RequestOutput
from swarm_panel.runtime.core.stats import StepStats

# An output and the request whose listener hears it (a plain tuple: one is made per token).
Delivery = tuple[Request, RequestOutput]


@dataclass(slots=True)
class StepOutcome:
    outputs: list[Delivery] = field(default_factory=list)
    # None for a plan that only released or cached sequences: nothing to plot.
    stats: StepStats | None = None
    # Its stats and outputs have gone to their listeners (runtime.serving.engine_core may hold them a step).
    handed_out: bool = False
