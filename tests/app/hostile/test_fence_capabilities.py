"""Attack: use root's capabilities (remount, raw devices, TIOCSTI, ptrace). The stand-in reads its own
capability sets: it holds none, as root too, and no_new_privs keeps any exec from regaining one. Under
Landlock the bounding set is emptied as well; bubblewrap (--cap-drop ALL, as root) leaves it full, which
no_new_privs makes moot."""

from __future__ import annotations

from swarm_panel.app.fence.walls import BWRAP
from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch

READ_CAPS = """
    for line in open("/proc/self/status"):
        if line.startswith("Cap"):
            name, value = line.split(":")
            seen[name] = value.strip()
    seen["no_new_privs"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0]
"""


def test_the_agent_holds_no_capability(under, fake_home, tmp_path):
    said = seen(launch(under.fence, READ_CAPS, tmp_path))
    sets = ("CapInh", "CapPrm", "CapEff", "CapAmb") + (() if under.fence.kind == BWRAP else ("CapBnd",))
    assert {name: said[name] for name in sets} == dict.fromkeys(sets, "0000000000000000")
    assert said["no_new_privs"] == "1"  # a setuid program gives nothing back either
