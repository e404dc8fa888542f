"""Overlap on the device (llama_decode returns before the outputs are ready): held outputs change nothing, an abort
comes after the held outputs, the closed loop finishes (tests/runtime/serving/test_overlap.py, offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.serving.test_overlap import *  # noqa: F403

# Minutes on a software device: run on a card (`-m gpu`), left out of CI's lane (`-m "gpu and not slow"`).
pytestmark = [pytest.mark.gpu, pytest.mark.slow]
