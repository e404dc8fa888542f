"""benchmarks/draft_economics.py: the drafter and the replay that count a guess only where greedy decoding made it."""

from __future__ import annotations

import random

import pytest

from benchmarks.draft_economics import NgramIndex, gained_per_step


def test_the_longest_ngram_wins_over_a_later_shorter_match():
    # "1 2" last occurred before 7, but the 3-gram "9 1 2" points at 5.
    history = [9, 1, 2, 5, 6, 1, 2, 7, 9, 1, 2]
    assert NgramIndex(history).draft(2, floor=1) == [5, 6]


def test_below_the_floor_nothing_is_guessed():
    history = [4, 1, 8, 3, 1]
    assert NgramIndex(history).draft(2, floor=1) == [8, 3]
    assert NgramIndex(history).draft(2, floor=2) == []


def test_the_index_grows_as_tokens_come_and_never_drafts_the_tail_itself():
    index = NgramIndex([1, 2])
    assert index.draft(1, floor=1) == []
    index.extend([3, 1])
    assert index.draft(2, floor=1) == [2, 3]
    index.extend([7])
    # "1 7" is new, and the latest "7" is the tail itself.
    assert index.draft(2, floor=1) == []


def test_an_output_that_copies_its_prompt_gains_k_tokens_a_step():
    prompt = list(range(10, 40))
    output = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]
    # Nothing ends in a match before the first token; after it, every step's k guesses are right.
    gained, right = gained_per_step([(prompt + [10], output[1:])], 3, floor=1)
    assert right == 1.0
    assert gained == pytest.approx(3.0)


def test_tokens_never_seen_before_gain_nothing():
    gained, right = gained_per_step([([1, 2, 3], [4, 5, 6, 7])], 2, floor=1)
    assert gained == 0.0 and right == 0.0


def test_a_wrong_guess_costs_the_step_its_later_guesses():
    # After "1" the drafter guesses "2 3" (from the prompt) but greedy went "2 9": one right, then a miss.
    gained, right = gained_per_step([([1, 2, 3, 1], [2, 9])], 2, floor=1)
    assert right == pytest.approx(0.5)
    assert gained == pytest.approx(1.0)


def _scan(history: list[int], k: int, floor: int) -> list[int]:
    for n in range(3, floor - 1, -1):
        if len(history) <= n:
            continue
        for i in range(len(history) - n - 1, -1, -1):
            if history[i:i + n] == history[-n:]:
                return history[i + n:i + n + k]
    return []


@pytest.mark.parametrize("seed", range(20))
def test_the_index_drafts_what_a_backward_scan_finds(seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(4) for _ in range(60)]
    index = NgramIndex(tokens[:1])
    for end in range(2, len(tokens) + 1):
        index.extend(tokens[end - 1:end])
        for floor in (1, 2, 3):
            assert index.draft(3, floor) == _scan(tokens[:end], 3, floor)
