"""Who gives up KV when evicting cached sequences is not enough: the one victim rule.

The scheduler asks it while planning (to fit a step) and when the engine ran out of KV before the
budget said it would. A padding lane goes first, since its rows are thrown away; then the live lane
the policy names. The caller decides what the victim loses: a live lane is recomputed later, unless
it is the last one, which nothing would be gained by preempting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from swarm_panel.runtime.scheduling.lanes import Lane

if TYPE_CHECKING:
    from swarm_panel.runtime.policies.batching import Policy
    from swarm_panel.runtime.policies.view import SchedulerView


def pick_victim(lanes: Sequence[Lane], policy: Policy, view: SchedulerView) -> tuple[Lane | None, int]:
    """The lane to give up its KV (None when no lane holds any), and how many lanes are live."""
    for lane in lanes:
        if lane.padding:
            return lane, sum(1 for other in lanes if other.is_live)
    live = [lane for lane in lanes if lane.is_live]
    return (policy.preemption_victim(view, live) if live else None), len(live)
