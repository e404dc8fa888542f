"""Sequences parked in host RAM and restored to the device while others decode: every next turn resumes exactly
(tests/runtime/llama/test_kv_parking.py, offloaded)."""

import pytest

# The CPU suite's tests and fixtures, collected here again with every layer offloaded.
from tests.runtime.llama.test_kv_parking import *  # noqa: F403

pytestmark = pytest.mark.gpu

# The panel's own views of parking are the CPU suite's to check: here only the device's behaviour.
del test_the_kv_plot_and_metrics_show_parked_memory  # noqa: F821
del test_the_cache_panel_names_the_conversations_parked_beside_the_streams  # noqa: F821
