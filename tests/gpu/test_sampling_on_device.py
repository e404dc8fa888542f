"""Sampling in the graph on the device: the same greedy tokens as the host path, a seeded draw that repeats,
draws that pass the chi-square test (tests/runtime/llama/test_backend_sampling.py, offloaded). These tests turn
it on themselves, so they run on Vulkan too, where `auto` keeps it off (runtime.llama.backend_sampling)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_backend_sampling import *  # noqa: F403

pytestmark = pytest.mark.gpu
