"""A seccomp filter that keeps the harness (and all it starts: a filter is inherited and outlives exec) from
every Unix socket of the host by path: /run/docker.sock, D-Bus's, systemd's, an ssh-agent's. Neither fence
stops a connect() there (a read-only mount does not; Landlock ABI 7 does not check a socket's path), so no
Unix socket is created at all: socket(AF_UNIX) is refused with EACCES, which programs fall back from
(glibc's nscd and nss-resolve lookups do). A pair of connected sockets stays allowed (Node's child stdio,
asyncio's self-pipe) but not a datagram pair, whose sendto() names any socket file. io_uring is refused as a
kernel without it refuses it (ENOSYS): its requests create and connect sockets with no system call to check.
A system call of another ABI (i386 through int 0x80, x32, arm32) kills the process: its socketcall() hides
its arguments behind a pointer. Seccomp filters need Linux 3.5 with CONFIG_SECCOMP_FILTER, as every
distribution builds it.

`seccomp -- ARGV` applies the filter and execs ARGV: inside bubblewrap, below the bridge, which itself
needs Unix sockets to carry the endpoint in. A step of its own (one Python start more) rather than a
preexec_fn in the bridge: the filter is made in a process with one thread and nothing else to do, and a
failure is said on stderr with its reason before anything of the harness runs. It exits 126 where the filter cannot be made (the harness
never runs without it), 127 where ARGV cannot be run.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

from swarm_panel.app.fence.landlock_sys import no_new_privs
from swarm_panel.app.fence.program import exec_prefix

CANNOT_FENCE, CANNOT_RUN = 126, 127
FROZEN_FLAG = "--fence-seccomp"
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
AF_UNIX, SOCK_DGRAM, SOCK_TYPE_MASK = 1, 2, 0xF
IO_URING_SETUP = 425  # the same number on every architecture (Linux 5.1 and later)
X32_BIT = 0x40000000
# Each machine: its AUDIT_ARCH_* (the ABI a system call came in through) and its socket(), socketpair().
ARCHES = {"x86_64": (0xC000003E, 41, 53), "aarch64": (0xC00000B7, 198, 199), "riscv64": (0xC00000F3, 198, 199)}
# struct seccomp_data: nr at 0, arch at 4, args[] from 16 as 64-bit words (low halves first: little-endian).
NR, ARCH, ARG0, ARG1 = 0, 4, 16, 24
LD_ABS, JEQ, JGE, AND, RET = 0x20, 0x15, 0x35, 0x54, 0x06
ALLOW, KILL_PROCESS, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def instructions() -> list[tuple[int, int, int, int]]:
    """The filter for this machine as (code, jt, jf, k); ValueError for one it has no numbers for (the
    fence then cannot be made there)."""
    machine = platform.machine()
    if machine not in ARCHES:
        raise ValueError(f"no seccomp filter for this machine's architecture ({machine}): only "
                         f"{', '.join(ARCHES)}")
    arch, socket, socketpair = ARCHES[machine]
    # x32 shares x86_64's AUDIT_ARCH, its numbers marked by a high bit: its socket() would pass unchecked.
    x32 = [(JGE, X32_BIT, "kill", None)] if machine == "x86_64" else []
    return _assemble([
        (LD_ABS, ARCH), (JEQ, arch, None, "kill"),
        (LD_ABS, NR), *x32,
        (JEQ, IO_URING_SETUP, "no io_uring", None),
        (JEQ, socket, "socket", None),
        (JEQ, socketpair, "socketpair", None),
        (RET, ALLOW),
        "socket", (LD_ABS, ARG0), (JEQ, AF_UNIX, "refuse", "allow"),
        "socketpair", (LD_ABS, ARG0), (JEQ, AF_UNIX, None, "allow"),
        (LD_ABS, ARG1), (AND, SOCK_TYPE_MASK), (JEQ, SOCK_DGRAM, "refuse", "allow"),  # the type less its flags
        "allow", (RET, ALLOW),
        "refuse", (RET, ERRNO | errno.EACCES),
        "no io_uring", (RET, ERRNO | errno.ENOSYS),
        "kill", (RET, KILL_PROCESS),
    ])


def _assemble(source: list) -> list[tuple[int, int, int, int]]:
    """(code, k[, jump if true, jump if false]) with each jump a label (a string in `source` names the
    instruction after it) or None for the next instruction: a jump counts from the instruction after it."""
    labels, at = {}, 0
    for entry in source:
        if isinstance(entry, str):
            labels[entry] = at
        else:
            at += 1
    code = []
    for entry in (e for e in source if not isinstance(e, str)):
        op, k, *jumps = entry
        here = len(code)
        jt, jf = (labels[j] - here - 1 if j else 0 for j in (jumps or (None, None)))
        code.append((op, jt, jf, k))
    return code


def refuse_unix_sockets() -> None:
    """Applies the filter to this thread and all it will exec or start; raises OSError or ValueError where
    it cannot. Sets no_new_privs first: a process without CAP_SYS_ADMIN may install a filter only then."""
    code = instructions()
    array = (_Instruction * len(code))(*(_Instruction(*entry) for entry in code))
    no_new_privs()
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(_Program(len(code), array)), 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"seccomp filter: {os.strerror(error)} (needs CONFIG_SECCOMP_FILTER, Linux 3.5)")


def command(argv: list[str]) -> list[str]:
    """`argv` run with the filter applied (`python -I -c`, as landlock_exec and the bridge are)."""
    return [*exec_prefix("swarm_panel.app.fence.seccomp", FROZEN_FLAG), "--", *argv]


def main(args: list[str] | None = None) -> int:
    args = sys.argv[1:] if args is None else args
    argv = args[1:] if args[:1] == ["--"] else args
    if not argv:
        print("seccomp: no program given after --", file=sys.stderr)
        return CANNOT_RUN
    try:
        refuse_unix_sockets()
    except (OSError, ValueError) as exc:
        print(f"seccomp: the fence could not be made: {exc}", file=sys.stderr, flush=True)
        return CANNOT_FENCE
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"seccomp: cannot run {argv[0]}: {exc}", file=sys.stderr, flush=True)
    return CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
