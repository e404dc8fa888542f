"""Attack: read the host's processes and shared memory. The test process's own environment holds a secret
and a file in the host's /dev/shm holds another; the stand-in reads /proc/<the test's pid>/environ, lists
/proc and reads the /dev/shm file. Nothing is read; with its own pid namespace, the host's processes are
not even listed (Landlock without namespaces lists them: docs/agents.md says so)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.app.hostile.harness import seen
from tests.app.hostile.host import launch

LOOK = """
    pid = {pid}
    seen["listed"] = str(pid) in os.listdir("/proc")
    for name, path in (("environ", f"/proc/{{pid}}/environ"), ("shm", {shm!r})):
        try:
            with open(path, "rb") as f:
                seen[name] = "read " + f.read().decode(errors="replace")[:40]
        except OSError as exc:
            seen[name] = exc.strerror
    try:
        seen["shm_listed"] = {shm_name!r} in os.listdir("/dev/shm")
    except OSError as exc:
        seen["shm_listed"] = exc.strerror
"""


@pytest.fixture
def host_shm():
    path = Path("/dev/shm") / f"swarm-panel-hostile-{uuid.uuid4().hex}"
    path.write_text("shared secret")
    yield path
    path.unlink()


def test_the_hosts_processes_and_shared_memory_stay_out_of_reach(under, fake_home, host_shm, tmp_path):
    code = LOOK.format(pid=os.getpid(), shm=str(host_shm), shm_name=host_shm.name)
    said = seen(launch(under.fence, code, tmp_path))
    assert not said["environ"].startswith("read") and not said["shm"].startswith("read"), said
    assert said["shm_listed"] in (False, "Permission denied")
    if under.namespaced:
        assert said["listed"] is False and said["shm"] == "No such file or directory"
