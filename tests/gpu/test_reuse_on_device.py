"""Prefix reuse on the device: every reuse of a hybrid model's sequence (copies, checkpoints, repeats, next
turns) gives the greedy tokens of a fresh computation on the same device (tests/runtime/llama/test_hybrid_reuse.py,
offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_hybrid_reuse import *  # noqa: F403

pytestmark = pytest.mark.gpu
