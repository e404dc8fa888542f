"""An engine's greedy tokens against a fresh computation of the same prompt alone (one request, reuse off).

On the CPU they must be equal: ggml's CPU kernels do not change with a step's size. On a device they do:
ggml-vulkan multiplies a step of up to 8 rows with its matrix-vector shader in f32 and a larger one with a
tiled matrix-matrix shader that holds the activations in f16, so a request's logits move with what rides its
step, and where a fresh computation's best tokens lie that close the batched step may take another (docs/gpu.md,
"Batch size and greedy tokens"). The gpu suite (tests/gpu/conftest.py) sets NEAR_TIE: then each token must be the
fresh computation's, or one within NEAR_TIE nats of its best, the fresh computation continuing from the engine's
token after each parting; and a request that recorded its own top logprobs must lie within NEAR_TIE of the fresh
ones. A wrong state or another conversation moves them by nats: the tiny models' logits span several.
"""

from __future__ import annotations

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, SamplingParams, TokenLogprob
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore

# None: tokens must be equal (the CPU). The gpu suite sets the nats a device's near-tie may take
# (tests/gpu/conftest.py).
NEAR_TIE: float | None = None
RIVALS = 20


def fresh(engine, prompt: list[int], n: int, logprobs: int | None = None) -> Request:
    """`n` greedy tokens of `prompt` computed alone on `engine`, reusing nothing and leaving no KV behind."""
    loop = EngineCore(Scheduler.for_engine(SchedulerConfig(num_lanes=1, prefix_cache=False), engine), engine,
                      RealClock())
    alone = Request(list(prompt), SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, logprobs=logprobs))
    loop.scheduler.add(alone, loop.clock.now())
    while loop.scheduler.has_work:
        loop.step()
    loop.flush()
    loop.scheduler.drop_prefix_cache()
    loop.step()
    return alone


def _fresh_positions(engine, prompt: list[int], tokens: list[int], logprobs: int | None):
    """Each position of `tokens` as a fresh computation of `prompt` sees it: (position, the fresh token, its
    logprobs or None), the fresh computation continuing from `tokens` after each parting."""
    start = 0
    while start < len(tokens):
        alone = fresh(engine, prompt + tokens[:start], len(tokens) - start, logprobs=logprobs)
        for k, token in enumerate(alone.output_token_ids):
            yield start + k, token, alone.output_logprobs[k] if logprobs else None
            if token != tokens[start + k]:
                break
        start += k + 1


def _near_tie(what: str, position: int, taken: int, token: int, theirs: TokenLogprob | None,
              limit: float | None) -> float:
    """Nats below the fresh best of a token that parted from the fresh one; asserted within `limit`."""
    assert limit, f"{what}: token {position} is {taken}, a fresh computation's is {token}"
    rivals = {rival: logprob for rival, _, logprob in theirs.top}
    assert taken in rivals, f"{what}: token {position} ({taken}) is not among the fresh {RIVALS} best"
    below = theirs.logprob - rivals[taken]
    assert below <= limit, f"{what}: token {position} is {below:.3f} nats below the best"
    return below


def _shift(what: str, position: int, own: TokenLogprob, theirs: TokenLogprob) -> float:
    """The largest shift of one of the best tokens' logprob against another's (a shift of all alike is the
    normalisation); at least half of the RIVALS best must be shared."""
    fresh_top = {token: logprob for token, _, logprob in theirs.top}
    moved = [logprob - fresh_top[token] for token, _, logprob in own.top if token in fresh_top]
    assert 2 * len(moved) >= RIVALS, f"{what}: token {position} shares {len(moved)} of the {RIVALS} best"
    return max(moved) - min(moved)


def near_ties(engine, prompt: list[int], tokens: list[int], what: str = "",
              limit: float | None = None) -> list[tuple[int, float]]:
    """Where `tokens` part from a fresh computation of `prompt`, as (position, nats below the best); each parting
    is asserted to be within `limit` (default NEAR_TIE; None: no parting at all)."""
    limit = NEAR_TIE if limit is None else limit
    return [(position, _near_tie(what, position, tokens[position], token, theirs, limit))
            for position, token, theirs in _fresh_positions(engine, prompt, tokens, RIVALS if limit else None)
            if token != tokens[position]]


def logprob_shifts(engine, prompt: list[int], tokens: list[int], logprobs: list[TokenLogprob],
                   what: str = "") -> list[float]:
    """How far a request's own top-RIVALS logprobs (`logprobs`, one per token of `tokens`) lie from a fresh
    computation's of `prompt` at each position (`_shift`). The same state computed in steps of other shapes
    moves them by rounding."""
    return [_shift(what, position, logprobs[position], theirs)
            for position, _, theirs in _fresh_positions(engine, prompt, tokens, RIVALS)]


def assert_fresh(engine, request: Request, what: str = "") -> list[tuple[int, float]]:
    """The request's greedy tokens are a fresh computation's (on a device: or near-ties there); on a device, a
    request that recorded its own top logprobs lies within NEAR_TIE of the fresh ones too. One fresh computation
    serves both. Returns the near-ties."""
    what = what or f"request {request.request_id}"
    tokens, own = request.output_token_ids, request.output_logprobs if NEAR_TIE is not None else []
    ties = []
    for position, token, theirs in _fresh_positions(engine, request.prompt_token_ids, tokens,
                                                    RIVALS if NEAR_TIE is not None else None):
        if own and (shift := _shift(what, position, own[position], theirs)) > NEAR_TIE:
            raise AssertionError(f"{what}: its logprobs at token {position} moved {shift:.3f} nats against each other")
        if token != tokens[position]:
            ties.append((position, _near_tie(what, position, tokens[position], token, theirs, NEAR_TIE)))
    return ties
