"""Stored prefixes on disk restored into the device's context: only what follows the head is computed, damaged files
are refused (tests/runtime/llama/test_prefix_store.py, offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_prefix_store import *  # noqa: F403

pytestmark = pytest.mark.gpu
