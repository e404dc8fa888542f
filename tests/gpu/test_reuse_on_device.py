"""Prefix reuse on the device: every reuse of a hybrid model's sequence (copies, checkpoints, repeats, next
turns) gives the greedy tokens of a fresh computation on the same device (tests/runtime/llama/test_hybrid_reuse.py,
offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_hybrid_reuse import *  # noqa: F403

# Minutes on a software device: run on a card (`-m gpu`), left out of CI's lane (`-m "gpu and not slow"`).
pytestmark = [pytest.mark.gpu, pytest.mark.slow]
