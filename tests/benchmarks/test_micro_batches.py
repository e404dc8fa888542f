"""benchmarks/micro_batches.py: llama.cpp's equal split replayed, and the cost split fitted from a trace."""

from __future__ import annotations

import numpy as np

from benchmarks.micro_batches import Call, parse_trace, split_equal, tally


def test_the_equal_split_gives_each_length_and_each_run_of_consecutive_sequences_a_micro_batch():
    assert split_equal(tuple((seq, 1) for seq in range(8))) == [(8, 1)]
    # A sequence computing its prompt elsewhere leaves a gap: two passes for one decode step.
    assert split_equal(((0, 1), (1, 1), (2, 1), (4, 1), (5, 1))) == [(3, 1), (2, 1)]
    assert split_equal(((0, 1), (2, 1)), sequential=False) == [(2, 1)]
    # Decode rows beside a prompt chunk: one token of each, then the rest of the chunk alone.
    assert split_equal(tuple((seq, 1) for seq in range(7)) + ((7, 246),)) == [(8, 1), (1, 245)]
    assert split_equal(((0, 11), (1, 109))) == [(2, 11), (1, 98)]
    # Eight prompts of 252 in one call: 64 tokens of each per 512-token micro-batch.
    assert split_equal(tuple((seq, 252) for seq in range(8))) == [(8, 64)] * 3 + [(8, 60)]


def test_the_fit_recovers_the_prices_that_made_the_trace():
    prices = np.array([0.015, 0.003, 0.002])
    shapes = [tuple((s, 1) for s in range(8)), ((0, 1), (1, 1), (3, 1)), ((0, 1), (1, 100)),
              ((0, 20), (1, 50), (2, 80)), ((0, 200),), tuple((s, 1) for s in range(5)) + ((5, 12),)]
    calls = []
    for rows in shapes:
        micro = len(split_equal(rows))
        decode = sum(n == 1 for _, n in rows)
        prompt = sum(n for _, n in rows if n > 1)
        calls.append(Call(float(np.dot([micro, decode, prompt], prices)), rows))
    t = tally(calls)
    assert np.allclose(t.prices, prices)
    assert t.calls == 6 and t.decode_rows == 8 + 3 + 1 + 5 and t.prompt_tokens == 100 + 150 + 200 + 12
    # (0, 20), (1, 50), (2, 80) runs as 3 x 20, 2 x 30 and 1 x 30: prompt pieces under 32 tokens each.
    assert t.micro == {"decode": 5, "prompt one large": 2, "prompt several small": 2, "prompt one small": 2}
    assert np.isclose(t.cost(prices), t.seconds)


def test_a_trace_line_holds_the_calls_rows_in_batch_order():
    calls = parse_trace(["12.5000 0.03400 0:1:121,3:1:121,1:116:1"])
    assert calls == [Call(0.034, ((0, 1), (3, 1), (1, 116)))]
