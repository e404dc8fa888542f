"""An engine's greedy tokens against a fresh computation of the same prompt alone (one request, reuse off).

On the CPU they must be equal: ggml's CPU kernels do not change with a step's size. On a device they do:
ggml-vulkan multiplies a step of up to 8 rows with its matrix-vector shader in f32 and a larger one with a
tiled matrix-matrix shader that holds the activations in f16, so a request's logits shift by a few hundredths
with what rides its step, and where a fresh computation's best tokens lie that close the batched step may take
another (docs/gpu.md, "Batch size and greedy tokens"). The gpu suite (tests/gpu/conftest.py) sets NEAR_TIE:
then each token must be the fresh computation's, or one within NEAR_TIE nats of its best, the fresh computation
continuing from the engine's token after each parting. A token from a wrong state or another conversation
lands far below the best: the tiny models' logits span several nats.
"""

from __future__ import annotations

from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import RealClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore

# None: tokens must be equal (the CPU). The gpu suite sets the nats a device's near-tie may take; the largest
# seen on lavapipe was 0.074 (docs/gpu.md).
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


def near_ties(engine, prompt: list[int], tokens: list[int], what: str = "",
              limit: float | None = None) -> list[tuple[int, float]]:
    """Where `tokens` part from a fresh computation of `prompt`, as (position, nats below the best); each parting
    is asserted to be within `limit` (default NEAR_TIE; None: no parting at all)."""
    limit = NEAR_TIE if limit is None else limit
    ties, start = [], 0
    while start < len(tokens):
        alone = fresh(engine, prompt + tokens[:start], len(tokens) - start, logprobs=RIVALS if limit else None)
        parted = next((k for k, (a, b) in enumerate(zip(alone.output_token_ids, tokens[start:])) if a != b), None)
        if parted is None:
            return ties
        assert limit, f"{what}: token {start + parted} is {tokens[start + parted]}, a fresh computation's is " \
                      f"{alone.output_token_ids[parted]} ({tokens} against {alone.output_token_ids} from {start})"
        chosen = alone.output_logprobs[parted]
        rivals = {token: logprob for token, _, logprob in chosen.top}
        taken = tokens[start + parted]
        assert taken in rivals, f"{what}: token {start + parted} ({taken}) is not among the fresh {RIVALS} best"
        below = chosen.logprob - rivals[taken]
        assert below <= limit, f"{what}: token {start + parted} is {below:.3f} nats below the best"
        ties.append((start + parted, below))
        start += parted + 1
    return ties


def assert_fresh(engine, request: Request, what: str = "") -> list[tuple[int, float]]:
    """The request's greedy tokens are a fresh computation's (on a device: or near-ties there)."""
    return near_ties(engine, request.prompt_token_ids, request.output_token_ids, what or f"request {request.request_id}")
