"""A lane: one place in the batch's width, holding a live request, a finished one riding as padding, or nothing."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.request import Request


@dataclass(slots=True, eq=False)
class Lane:
    index: int
    request: Request | None = None
    # The request finished but its lane keeps riding the step (a policy that pads finished lanes).
    padding: bool = False
    padding_tokens: int = 0
    # Admission order: which lane is newest when one must give up its KV.
    admitted_seq: int = 0
    # The request has been looked up in the prefix cache since it entered this lane.
    prefix_checked: bool = False

    @property
    def kv_tokens(self) -> int:
        return self.request.num_computed_tokens + self.padding_tokens if self.request else 0

    @property
    def is_live(self) -> bool:
        return self.request is not None and not self.padding
