"""Where a hybrid or recurrent model's sequences can resume, and where prompts leave checkpoints.

A recurrent state is exact only at the position it has reached, so a sequence holding `held` tokens
can hand on a prefix of n tokens only when n == held, or when a checkpoint of those n tokens exists
(runtime.core.checkpoints). Checkpoints are made where later requests are likely to resume:
- the end of a shared system prompt, so other agents start from it: the first end-of-turn token of a
  chat prompt (`<|im_end|>` after the system message), or what the caller marks in
  Request.checkpoint_positions (the bench's synthetic system prompt);
- the end of every later turn in the prompt, so a harness that re-renders or reorders its history
  (aider inserts the last exchange before its files) resumes at the last turn both prompts share
  rather than at the system prompt's end (a turn's end costs a step boundary and a state copy once:
  a checkpoint kept for the same tokens is not made again);
- the end of each prompt but its last token, so an exact repeat, or the next turn of a conversation
  whose re-rendered history differs from the tokens sampled, resumes there (a request's first sample
  needs one uncomputed prompt token, so a resume point is never the whole prompt).
A prompt chunk ends at the next such boundary and the engine snapshots the state after it; the last
prompt token then rides the next step beside the decode rows. That costs a request one step of
latency, so a prompt shorter than MIN_CHECKPOINT_TOKENS, cheap to recompute, gets no checkpoint at
its end. A cut costs more than the step, too: llama.cpp splits a hybrid's step into micro-batches
whose sequences all take the same number of tokens, so every short piece is one more pass over the
weights (runtime.scheduling.step_rows.piece_tokens). So boundaries closer than NEAR_TOKENS make
no cut of their own, at the price of at most that many tokens recomputed by a request that resumes
there:
- the end of the prompt but its last token, when a turn ends at most NEAR_TOKENS before it (the
  generation prompt after the last message: Qwen3.5's is 11 tokens), is left to that turn's end;
- a boundary at most NEAR_TOKENS past a chunk's start (the end of the reply a follow-up turn resumes
  after) moves back to the start, where the state is at hand before the step: the engine snapshots it
  then (Row.checkpoint_start), before computing on.
The shared head's end (`head_ends`) is also where the engine keeps a stored prefix
(runtime.reuse.stored), on any model, where the head is long.
"""

from __future__ import annotations

import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.core.request import Request
from swarm_panel.runtime.reuse.prefix_cache import MIN_MATCH_TOKENS, as_tokens

MIN_CHECKPOINT_TOKENS = 64
NEAR_TOKENS = 16


def turn_end_array(turn_end_tokens: frozenset[int]) -> np.ndarray:
    return np.fromiter(turn_end_tokens, dtype=np.int64)


def head_ends(request: Request, turn_ends: np.ndarray) -> list[int]:
    """Where the prompt's shared head ends, sorted: the first end-of-turn token (the system message's),
    and the positions the caller marked. Other requests are likely to start with those tokens."""
    prompt = request.num_prompt_tokens
    marked = {p for p in request.checkpoint_positions if MIN_MATCH_TOKENS <= p < prompt}
    if len(turn_ends):
        ends = np.flatnonzero(np.isin(as_tokens(request.token_ids[:prompt]), turn_ends))
        if len(ends) and MIN_MATCH_TOKENS <= ends[0] + 1 < prompt:
            marked.add(int(ends[0]) + 1)
    return sorted(marked)


class Resumption:
    def __init__(self, checkpoints: CheckpointStore, turn_end_tokens: frozenset[int] = frozenset()) -> None:
        self.checkpoints = checkpoints
        self._turn_ends = turn_end_array(turn_end_tokens)

    def point(self, tokens: np.ndarray, n: int, held: int) -> int:
        """A match of n tokens against a sequence holding `held`, cut back to where it can resume."""
        return n if n == held else self.checkpoints.longest(tokens, n)

    def boundaries(self, request: Request) -> list[int]:
        prompt = request.num_prompt_tokens
        marked = set(head_ends(request, self._turn_ends))
        if len(self._turn_ends):
            ends = np.flatnonzero(np.isin(as_tokens(request.token_ids[:prompt]), self._turn_ends)) + 1
            marked.update(int(end) for end in ends if MIN_MATCH_TOKENS <= end < prompt)
        last = prompt - 1
        if last >= MIN_CHECKPOINT_TOKENS and not any(last - NEAR_TOKENS <= b < last for b in marked):
            marked.add(last)
        return sorted(marked)

    def chunk_end(self, request: Request, start: int, end: int) -> tuple[int, bool, bool]:
        """Where a prompt chunk over [start, end) should end, whether a checkpoint follows it, and whether
        one is taken at its start instead of a boundary just past it."""
        tokens = None
        at_start = False
        heads = None
        for boundary in self.boundaries(request):
            if start < boundary <= end:
                tokens = as_tokens(request.token_ids) if tokens is None else tokens
                if self.checkpoints.has(tokens[:boundary]):
                    continue
                if boundary - start <= NEAR_TOKENS and start >= MIN_MATCH_TOKENS:
                    # Other agents resume exactly at a shared head's end: that cut stays.
                    heads = head_ends(request, self._turn_ends) if heads is None else heads
                    if boundary not in heads:
                        at_start = at_start or not self.checkpoints.has(tokens[:start])
                        continue
                return boundary, True, at_start
        return end, False, at_start
