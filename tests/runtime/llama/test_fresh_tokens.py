"""The comparison every engine test makes: on the CPU a request's greedy tokens must equal a fresh computation's
exactly; only where a tolerance is set (the gpu suite) may a token be a near-tie (tests/fresh_tokens.py)."""

from __future__ import annotations

import pytest

from swarm_panel.runtime.llama.engine import LlamaEngine
from tests.fresh_tokens import RIVALS, fresh, logprob_shifts, near_ties


@pytest.fixture(scope="module")
def engine(tiny_qwen35_model_path):
    with LlamaEngine(tiny_qwen35_model_path, max_lanes=2, n_ctx=1024, n_batch=64) as eng:
        yield eng


def test_the_fresh_tokens_themselves_pass_and_any_other_fails_on_the_cpu(engine):
    prompt = engine.tokenizer.tokenize("Run the tests, then fix the parser.")
    computed = fresh(engine, prompt, 4, logprobs=RIVALS)
    assert near_ties(engine, prompt, computed.output_token_ids, "itself") == []
    # The runner-up at the third token: a near-tie on a device perhaps, never the same tokens on the CPU.
    runner_up = next(token for token, _, _ in computed.output_logprobs[2].top if token != computed.output_token_ids[2])
    parted = [*computed.output_token_ids[:2], runner_up]
    with pytest.raises(AssertionError, match="token 2 is"):
        near_ties(engine, prompt, parted, "runner-up")
    below = computed.output_logprobs[2].logprob - dict((t, lp) for t, _, lp in computed.output_logprobs[2].top)[runner_up]
    # Given a tolerance, the same token is a near-tie within it and a failure below it.
    assert near_ties(engine, prompt, parted, "runner-up", limit=below + 1e-3) == [(2, pytest.approx(below))]
    with pytest.raises(AssertionError, match="nats below the best"):
        near_ties(engine, prompt, parted, "runner-up", limit=below / 2)


def test_logprobs_shift_by_nothing_against_their_own_computation_and_by_nats_against_another(engine):
    prompt = engine.tokenizer.tokenize("Run the tests, then fix the parser.")
    computed = fresh(engine, prompt, 4, logprobs=RIVALS)
    shifts = logprob_shifts(engine, prompt, computed.output_token_ids, computed.output_logprobs)
    assert len(shifts) == 4 and max(shifts) < 1e-3
    # Another conversation's logprobs: few of the best tokens shared, or those far apart.
    other = engine.tokenizer.tokenize("Summarise the failing test's log for the team.")
    with pytest.raises(AssertionError):
        assert max(logprob_shifts(engine, other, computed.output_token_ids, computed.output_logprobs)) < 0.75
