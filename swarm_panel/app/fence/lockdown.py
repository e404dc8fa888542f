"""What a process of the fence asks of the kernel about itself (prctl, capset, unshare, mount): to end with
its parent, to be untraceable, to adopt the orphans below it, to hold no capability, and new pid and mount namespaces with a
/proc, a /dev/shm and terminals of their own. Each raises OSError with the call that failed."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PR_SET_DUMPABLE, PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_CAP_AMBIENT = 4, 1, 24, 36, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAPABILITY_VERSION_3 = 0x20080522
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _prctl(option: int, arg: int, what: str) -> None:
    ctypes.set_errno(0)
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), what)


def die_with_parent(signal_number: int) -> None:
    """The kernel sends `signal_number` when the parent ends (it outlives exec)."""
    _prctl(PR_SET_PDEATHSIG, signal_number, "PR_SET_PDEATHSIG")


def undumpable() -> None:
    """No process without CAP_SYS_PTRACE may trace this one, read or write its memory (/proc/PID/mem) or take
    its file descriptors, though of the same user: the harness below, whose filter this one has not. Exec
    makes a program dumpable again, so what this process starts is not kept from its debugger."""
    _prctl(PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")


def adopt_orphans() -> None:
    """Orphans below this process (a double fork, a `setsid` daemon) become its children, not init's."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """No capability now nor after any exec, root or not: the bounding set emptied (no exec regains one),
    the ambient set cleared, then the effective, permitted and inheritable sets."""
    if _has_any_capability():
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        for cap in range(last + 1):
            _prctl(PR_CAPBSET_DROP, cap, f"PR_CAPBSET_DROP {cap}")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    ctypes.set_errno(0)
    _check(_libc.capset(ctypes.byref(_CapHeader(CAPABILITY_VERSION_3, 0)), ctypes.byref((_CapData * 2)())), "capset")


def _has_any_capability() -> bool:
    """Dropping from the bounding set needs CAP_SETPCAP; a process holding none has an empty one already
    or cannot change it, and then exec gives it none as long as it is not root."""
    status = Path("/proc/self/status").read_text()
    return any(line.split()[1].strip("0") for line in status.splitlines() if line.startswith("CapEff:"))


def unshare_pid_and_mounts() -> None:
    """The next child forked is pid 1 of a new pid namespace, with a mount namespace of its own; where this
    process is not root, inside a user namespace that maps only its own ids."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWPID | CLONE_NEWNS | (0 if uid == 0 else CLONE_NEWUSER)
    ctypes.set_errno(0)
    _check(_libc.unshare(flags), "unshare(CLONE_NEWPID|CLONE_NEWNS)")
    if uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mount(source: str, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    ctypes.set_errno(0)
    _check(_libc.mount(source.encode(), target.encode(), kind.encode() if kind else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mount {kind or 'bind'} on {target}")


def private_proc_shm_and_terminals() -> None:
    """In pid 1 of the new namespaces: nothing mounted here reaches the host; a /proc that lists only this
    namespace's processes; an empty /dev/shm; a devpts instance of its own (its /dev/ptmx too), so no
    host terminal can be opened."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    _mount("/dev/pts/ptmx", "/dev/ptmx", None, MS_BIND)
