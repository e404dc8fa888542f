"""Never the wrong conversation, on the device: six agents on two lanes whose conversations differ only late,
parked, restored and matched against cached prefixes; each reply equals its conversation computed alone
(tests/app/server/test_never_the_wrong_conversation.py, served with every layer offloaded)."""

import pytest

pytest.importorskip("openai", reason="the server tests' client")

# The CPU suite's tests and fixtures, collected here again; the server's engine offloads by default.
from tests.app.server.test_never_the_wrong_conversation import *  # noqa: F403

# Minutes on a software device: run on a card (`-m gpu`), left out of CI's lane (`-m "gpu and not slow"`).
pytestmark = [pytest.mark.gpu, pytest.mark.slow]
