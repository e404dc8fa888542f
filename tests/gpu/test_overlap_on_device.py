"""Overlap on the device (llama_decode returns before the outputs are ready): held outputs change nothing, an abort
comes after the held outputs, the closed loop finishes (tests/runtime/serving/test_overlap.py, offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.serving.test_overlap import *  # noqa: F403

pytestmark = pytest.mark.gpu
