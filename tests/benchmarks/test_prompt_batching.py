"""benchmarks/prompt_batching.py: the prompt rate of prompts that ran together (the servers need llama-server)."""

from __future__ import annotations

from benchmarks.prompt_batching import prompt_rate


def test_prompts_that_ran_together_are_timed_by_the_longest():
    # Two 500-token prompts computed in one phase that lasted 2 s: 500 tokens a second, not 250 or 1,000.
    assert prompt_rate([{"prompt_n": 500, "prompt_ms": 2000.0}, {"prompt_n": 500, "prompt_ms": 1800.0}]) == 500.0


def test_a_phase_that_took_no_time_has_no_rate():
    assert prompt_rate([{"prompt_n": 0, "prompt_ms": 0.0}]) == 0.0
