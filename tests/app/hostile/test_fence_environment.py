"""Attack: read the user's secrets from the environment. The user's GITHUB_TOKEN, AWS keys, HF_TOKEN, agent
socket and provider keys are set when the agent is launched; the stand-in sees none of them, only what
the allowlist passes and what the launch sets, and its HOME is its own."""

from __future__ import annotations

from swarm_panel.app.harness.config import PASSED, PASSED_PREFIXES
from tests.app.hostile.conftest import SECRETS
from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch

# What the launch sets (the stand-in is configured as Qwen Code is; bubblewrap's --chdir sets PWD; the
# network plan keeps the endpoint off any proxy).
SET = {"HOME", "NO_COLOR", "TMPDIR", "QWEN_HOME", "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL",
       "QWEN_CODE_MAX_OUTPUT_TOKENS", "PWD", "no_proxy", "NO_PROXY"}


def test_no_secret_of_the_users_environment_reaches_the_agent(under, fake_home, tmp_path):
    said = seen(launch(under.fence, "seen.update(os.environ)", tmp_path))
    assert not set(SECRETS) & set(said)
    assert not any(secret in value for value in said.values() for secret in SECRETS.values())
    assert {name for name in said if name not in SET and not name.startswith(PASSED_PREFIXES)} <= PASSED
    assert said["PATH"] and said["HOME"] != str(fake_home)
