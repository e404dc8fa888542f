"""What the chosen fence holds on this machine, guarantee by guarantee, with the kernel feature each one
needs: what `agents list` prints, and what docs/agents.md ("The fence") explains."""

from __future__ import annotations

from typing import NamedTuple

from swarm_panel.app.fence import landlock, landlock_sys
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK, Fence


class Guarantee(NamedTuple):
    what: str
    held: bool
    why: str


WRITES = "writes only its worktree, its config home and a temp folder of its own"
READS = "reads nothing of your home, the host's /tmp, or another agent's worktree or config home"
ENV = "gets no secret of your environment (only PATH, the locale, TERM, TZ, USER, SHELL, CA paths)"
TREE = "every process it started has ended before its run is marked ended"
PROC = "sees only its own processes (/proc) and its own shared memory (/dev/shm)"
TTY = "cannot open or type into a terminal of the host (TIOCSTI)"
CAPS = "holds no capability, as root too"
SIGNALS = "cannot signal a process outside the fence"
ABSTRACT = "cannot connect to an abstract Unix socket outside the fence"
NAMED_SOCKETS = "cannot connect to a Unix socket by path (/run/docker.sock, D-Bus's, an ssh-agent's...)"
# Either fence's probe runs `true` through the filter: where a fence was chosen, the filter works.
SECCOMP_WHY = ("the seccomp filter (Linux 3.5, CONFIG_SECCOMP_FILTER) refuses it socket(AF_UNIX), a "
               "datagram socketpair and io_uring: {}")


def guarantees(fence: Fence) -> list[Guarantee]:
    """Each guarantee, whether `fence` holds it here, and why (or why not)."""
    env = Guarantee(ENV, True, "the launcher passes a list of variables, whatever the fence")
    if fence.kind == BWRAP:
        return [env, *_bubblewrap()]
    if fence.kind == LANDLOCK:
        return [env, *_landlock(landlock.abi(), landlock.probe_namespaces())]
    none = f"no fence: {fence.reason}"
    return [env, *(Guarantee(what, False, none)
                   for what in (WRITES, READS, TREE, PROC, TTY, CAPS, SIGNALS, ABSTRACT, NAMED_SOCKETS))]


def _bubblewrap() -> list[Guarantee]:
    return [
        Guarantee(WRITES, True, "mount namespace: / read-only, only its folders bound writable"),
        Guarantee(READS, True, "mount namespace: tmpfs over the home, /tmp and the agents' folders"),
        Guarantee(TREE, True, "its own pid namespace (--unshare-pid), below the fence's reaper"),
        Guarantee(PROC, True, "its own pid namespace and /proc; a fresh /dev (--dev) with its own /dev/shm"),
        Guarantee(TTY, True, "a fresh /dev with its own terminals, and a new session (--new-session)"),
        Guarantee(CAPS, True, "--cap-drop ALL as root; an unprivileged bwrap gives none"),
        Guarantee(SIGNALS, True, "its own pid namespace: no host process is there to signal"),
        Guarantee(ABSTRACT, True, "the seccomp filter: no Unix socket of its own making; and its own network "
                                  "namespace (--unshare-net), the endpoint bridged in (app.fence.network)"),
        Guarantee(NAMED_SOCKETS, True, SECCOMP_WHY.format("a read-only mount does not stop a connect()")),
    ]


def _landlock(abi: int, namespaces_refused: str) -> list[Guarantee]:
    namespaced = not namespaces_refused
    ns_why = "its own pid and mount namespaces" if namespaced else f"no namespaces here: {namespaces_refused}"
    tree_why = ("its own pid namespace: its pid 1 ends, the kernel kills the rest" if namespaced else
                "the fence's reaper (PR_SET_CHILD_SUBREAPER) adopts and kills them; only a SIGKILL of the "
                f"reaper itself from outside would free them ({ns_why})")
    scoped = abi >= landlock_sys.SCOPES_SINCE
    return [
        Guarantee(WRITES, True, f"Landlock ABI {abi}: writing granted beneath its folders only"),
        Guarantee(READS, True, f"Landlock ABI {abi}: reading granted beside the hidden folders only"),
        Guarantee(TREE, True, tree_why),
        Guarantee(PROC, namespaced, f"{ns_why} with a /proc and /dev/shm of their own" if namespaced else
                  f"{ns_why}: the host's /proc is listed (another user's processes stay unreadable, and a "
                  "process outside the fence cannot be traced); /dev/shm is refused"),
        Guarantee(TTY, abi >= 5 or namespaced,
                  "no device ioctl (Landlock ABI 5, IOCTL_DEV), no host terminal granted, a new session, "
                  "no CAP_SYS_ADMIN" if abi >= 5 else
                  f"Landlock ABI {abi} < 5 cannot refuse ioctls; {ns_why}"),
        Guarantee(CAPS, True, "bounding, ambient and effective sets emptied before the harness runs"),
        Guarantee(SIGNALS, scoped, f"Landlock ABI {abi}: " + ("LANDLOCK_SCOPE_SIGNAL" if scoped else "needs ABI 6")),
        Guarantee(ABSTRACT, True, "the seccomp filter: no Unix socket of its own making" +
                  (f"; and Landlock ABI {abi}'s LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET" if scoped else "")),
        Guarantee(NAMED_SOCKETS, True, SECCOMP_WHY.format(f"Landlock ABI {abi} does not check connect() on a "
                                                          "socket's path")),
    ]
