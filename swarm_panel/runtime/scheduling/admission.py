"""Admission: waiting requests move into free lanes, in queue order, while the KV budget holds their prompts.

The policy decides whether anyone may enter and orders the queue (runtime.policies.batching.Admission); this
carries it out. An admitted prompt is promised its KV until computed, with one token of headroom per
live lane for its next decode, so admission never lets a step overrun the budget. Cached prefixes
yield first, least recently used first, except the one the request will adopt in place.
"""

from __future__ import annotations

from collections import deque

from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.scheduling.kv_budget import KVBudget
from swarm_panel.runtime.scheduling.lanes import LaneTable
from swarm_panel.runtime.scheduling.prefix_planner import PrefixPlanner


def fill_free_lanes(waiting: deque[Request], lanes: LaneTable, kv: KVBudget, prefix: PrefixPlanner,
                    width: int) -> None:
    if not waiting:
        return
    live = lanes.live()
    promised = len(live) + sum(lane.request.num_tokens - lane.request.num_computed_tokens for lane in live)
    state = kv.state_tokens
    for lane in lanes[:width]:
        if not waiting:
            break
        if lane.request is not None:
            continue
        request = waiting[0]
        need = request.num_tokens + 1 + state
        # A resident cached sequence it will adopt moves from kv_cached to kv_used instead of being
        # computed; a parked one comes back from host RAM into cells it needs like any prompt.
        adopt = prefix.adoptable(request)
        if adopt is not None and not adopt.parked:
            need -= adopt.num_tokens + state
        while not kv.can_admit(need, promised) and prefix.evict_one(keep=adopt):
            pass
        if not kv.can_admit(need, promised):
            break
        waiting.popleft()
        lanes.occupy(lane, request)
        # Its state is held from now on; the rest of `need` is a promise until computed.
        promised += need - state
