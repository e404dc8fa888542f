"""How the card's ceiling sags as contexts grow, per KV type: pure arithmetic on a CardProfile.

The ceiling at a context is B/t(B) with B the most sequences of that context the card holds (the
memory plan's answer), each reading its own KV every step. Longer contexts cost twice: fewer lanes
fit, and each lane's step reads more. A quantized KV halves or quarters both.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm_panel.runtime.core.config import MAX_LANES
from swarm_panel.runtime.modeled.profiles import CardProfile
from swarm_panel.runtime.planning.memory_plan import KV_TYPES

# The contexts `swarm-panel bench --ceiling` prints after the reference one.
DEFAULT_CONTEXTS = (1024, 4096, 8192, 16384, 32768, 65536)


@dataclass(frozen=True, slots=True)
class Ceiling:
    kv_type: str
    context: int
    lanes: int  # the most that fit (0: not even one)
    step_ms: float  # t(B) at those lanes, each at `context`
    tok_s: float  # B / t(B)

    def as_dict(self) -> dict:
        return {"kv_type": self.kv_type, "context": self.context, "lanes": self.lanes, "step_ms": self.step_ms,
                "tok_s": self.tok_s}


def ceiling(profile: CardProfile, context: int, max_lanes: int = MAX_LANES) -> Ceiling:
    """The profile's ceiling at `context` tokens a sequence, at the most lanes that fit (at most `max_lanes`)."""
    lanes = profile.most_lanes(context, limit=max_lanes)
    step = profile.decode_step_ms(lanes, context) if lanes else 0.0
    return Ceiling(profile.kv_type, context, lanes, step, lanes / step * 1e3 if lanes else 0.0)


def ceiling_table(profile: CardProfile, contexts: tuple[int, ...], kv_types: tuple[str, ...] = KV_TYPES,
                  max_lanes: int = MAX_LANES) -> dict[str, list[Ceiling]]:
    """kv_type -> its ceiling at each context."""
    return {kv: [ceiling(profile.with_kv_type(kv), c, max_lanes) for c in contexts] for kv in kv_types}
