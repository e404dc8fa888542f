"""The small program at the top of every fenced launch. It stays above the harness as its reaper (every
process the harness started ends with it, app.fence.reaper) and, under Landlock, confines the harness
before it runs: a Landlock ruleset (read only beneath --read, write only beneath --write; no device ioctl;
no signal or abstract socket out of the fence where the ABI scopes them), no capability, no Unix socket of
its own making (app.fence.seccomp: Landlock does not check connect() on a socket's path), a session of its
own, and with --namespaces its own pid and mount namespaces: a /proc of its own, a private /dev/shm and
terminals, and every process gone the moment the harness ends.

`landlock_exec [--read P]... [--write P]... [--tmp P] [--chdir P] [--parent PID] [--namespaces]
[--connect PORT]... [--supervise-only] -- ARGV`. --supervise-only: ARGV is a fence of its own (bwrap): only
reap below it. With --connect, the ruleset lets it bind no TCP port and connect to those TCP ports
only; a kernel without Landlock's TCP rules (ABI 4) runs it with a warning.
It exits 126 where the fence cannot be made (nothing runs unfenced), 127 where ARGV cannot be run, else
as ARGV did (a signal as the same signal; under --namespaces as 128 + the signal).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

from swarm_panel.app.fence import landlock_sys as ll
from swarm_panel.app.fence import seccomp
from swarm_panel.app.fence.lockdown import (
    die_with_parent,
    drop_capabilities,
    private_proc_shm_and_terminals,
    unshare_pid_and_mounts,
)
from swarm_panel.app.fence.reaper import LAUNCHER_GONE, exit_as, supervise

CANNOT_FENCE, CANNOT_RUN = 126, 127
READ = ll.EXECUTE | ll.READ_FILE | ll.READ_DIR
WRITE = (ll.WRITE_FILE | ll.REMOVE_DIR | ll.REMOVE_FILE | ll.MAKE_CHAR | ll.MAKE_DIR | ll.MAKE_REG | ll.MAKE_SOCK
         | ll.MAKE_FIFO | ll.MAKE_BLOCK | ll.MAKE_SYM | ll.REFER | ll.TRUNCATE)
SCOPES = ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET
# The character devices every program reads or writes (no ioctl on them: a terminal's would inject input).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Only the namespaces' own: the host's shared memory and terminals are never granted.
PRIVATE_DEVICES = (("/dev/shm", READ | WRITE), ("/dev/pts", READ | WRITE | ll.IOCTL_DEV),
                   ("/dev/ptmx", ll.READ_FILE | ll.WRITE_FILE | ll.IOCTL_DEV))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="landlock_exec", description=__doc__)
    parser.add_argument("--read", action="append", default=[], help="a path whose content may be read")
    parser.add_argument("--write", action="append", default=[], help="a path whose content may be written")
    parser.add_argument("--tmp", help="the TMPDIR the program is given, writable as a --write path")
    parser.add_argument("--chdir", help="the folder it starts in")
    parser.add_argument("--parent", type=int, help="the launcher's pid: everything ends when it does")
    parser.add_argument("--namespaces", action="store_true",
                        help="new pid and mount namespaces (and a user namespace where not root)")
    parser.add_argument("--connect", action="append", type=int, default=[],
                        help="a TCP port it may connect to; given, it may bind none and connect to no other")
    parser.add_argument("--supervise-only", action="store_true",
                        help="apply nothing: ARGV is a fence of its own (bwrap); only reap below it")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    return parser


def fence(reads: list[str], writes: list[str], *, private_devices: bool = False, connect: list[int] = ()) -> None:
    """Applies the ruleset to this process (and what it will exec); raises OSError where it cannot.
    `connect`: given, no TCP port may be bound and only these connected to (ABI 4; an older kernel runs
    with the filesystem's rules and a warning, as it cannot hold TCP)."""
    abi = ll.abi_version()
    net = 0
    if connect and abi >= ll.NET_SINCE:
        net = ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    elif connect:
        print(f"landlock_exec: warning: TCP is not fenced: the kernel's Landlock ABI is {abi}; TCP rules need "
              f"{ll.NET_SINCE} (Linux 6.7)", file=sys.stderr, flush=True)
    ruleset = ll.Ruleset(abi, ll.handled(READ | WRITE | ll.IOCTL_DEV, abi), net=net,
                         scoped=SCOPES if abi >= ll.SCOPES_SINCE else 0)
    for port in sorted(set(connect)) if net else ():
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port}")
        ruleset.allow_port(port, ll.NET_CONNECT_TCP)
    for path in reads:
        ruleset.allow_path(path, READ)
    for path in writes:
        ruleset.allow_path(path, READ | WRITE)
    for path in DEVICES:
        ruleset.allow_path(path, ll.READ_FILE | ll.WRITE_FILE)
    for path, rights in PRIVATE_DEVICES if private_devices else ():
        ruleset.allow_path(path, rights)
    ruleset.restrict_self()


def main(args: list[str] | None = None) -> int:
    options = _parser().parse_args(args)
    argv = options.argv[1:] if options.argv[:1] == ["--"] else options.argv
    if not argv:
        print("landlock_exec: no program given after --", file=sys.stderr)
        return CANNOT_RUN
    die_with_parent(LAUNCHER_GONE)
    if options.parent is not None and os.getppid() != options.parent:
        return CANNOT_RUN  # the launcher ended before the signal was asked for
    child = lambda: _harness(options, argv)
    if options.namespaces:
        try:
            unshare_pid_and_mounts()
        except OSError as exc:
            return _cannot_fence(f"no pid and mount namespaces: {exc}")
        child = lambda: _pid_one(options, argv)
    exit_as(supervise(child))


def _pid_one(options: argparse.Namespace, argv: list[str]) -> NoReturn:
    """Pid 1 of the new namespaces: mounts what the harness sees as its own, then reaps below it. When it
    exits, the kernel kills every process left in the namespace before anyone sees it gone."""
    try:
        die_with_parent(LAUNCHER_GONE)
        private_proc_shm_and_terminals()
    except OSError as exc:
        os._exit(_cannot_fence(f"the namespaces' mounts: {exc}"))
    exit_as(supervise(lambda: _harness(options, argv)))


def _harness(options: argparse.Namespace, argv: list[str]) -> NoReturn:
    try:
        os.setsid()  # no controlling terminal, and none of the launcher's process group
        die_with_parent(signal.SIGKILL)
        if not options.supervise_only:
            writes = [*options.write, *([options.tmp] if options.tmp else [])]
            fence(options.read, writes, private_devices=options.namespaces, connect=options.connect)
            drop_capabilities()
            seccomp.refuse_unix_sockets()  # Landlock does not check connect() on a socket's path
    except Exception as exc:  # noqa: BLE001 - whatever stops the fence, the harness must not run unfenced
        os._exit(_cannot_fence(str(exc)))
    env = dict(os.environ)
    if options.tmp:
        env["TMPDIR"] = options.tmp
    try:
        if options.chdir:
            os.chdir(options.chdir)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"landlock_exec: cannot run {argv[0]}: {exc}", file=sys.stderr, flush=True)
    os._exit(CANNOT_RUN)


def _cannot_fence(why: str) -> int:
    print(f"landlock_exec: the fence could not be made: {why}", file=sys.stderr, flush=True)
    return CANNOT_FENCE


if __name__ == "__main__":
    sys.exit(main())
