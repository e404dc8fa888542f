"""A client's hang-up on the device: a resent prompt resumes with the fresh tokens
(tests/runtime/scheduling/test_abort_reuse.py, offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.scheduling.test_abort_reuse import *  # noqa: F403

pytestmark = pytest.mark.gpu
