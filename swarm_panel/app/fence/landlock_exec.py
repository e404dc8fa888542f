"""The small program that applies a Landlock ruleset to itself and then becomes the harness (exec), so
the harness and everything it starts may read only beneath the --read paths and write only beneath the
--write ones (and the terminals, /dev/null and /dev/shm). Executing is not restricted: what is read may run.

`python -m swarm_panel.app.fence.landlock_exec [--read P]... [--write P]... [--tmp P] [--chdir P] [--parent PID]
[--connect PORT]... -- ARGV`. With --connect, a second ruleset (app.fence.landlock_net) lets it bind no TCP port
and connect to those TCP ports only; a kernel without Landlock's TCP rules (ABI 4) runs it with a warning.
It exits 126 where the ruleset cannot be applied (nothing runs unfenced) and 127 where ARGV cannot be run.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

# Character devices every program writes, and the folders of terminals and POSIX shared memory.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx")
DEVICE_FOLDERS = ("/dev/pts", "/dev/shm")
CANNOT_FENCE, CANNOT_RUN = 126, 127
PR_SET_PDEATHSIG = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="landlock_exec", description=__doc__)
    parser.add_argument("--read", action="append", default=[], help="a path whose content may be read")
    parser.add_argument("--write", action="append", default=[], help="a path whose content may be written")
    parser.add_argument("--tmp", help="the TMPDIR the program is given, writable as a --write path")
    parser.add_argument("--chdir", help="the folder it starts in")
    parser.add_argument("--parent", type=int, help="the launcher's pid: the program ends when it does")
    parser.add_argument("--connect", action="append", type=int, default=[],
                        help="a TCP port it may connect to; given, it may bind none and connect to no other")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    return parser


def _rights(abi: int):
    from landlock import FSAccess

    write = (FSAccess.WRITE_FILE | FSAccess.REMOVE_DIR | FSAccess.REMOVE_FILE | FSAccess.MAKE_CHAR
             | FSAccess.MAKE_DIR | FSAccess.MAKE_REG | FSAccess.MAKE_SOCK | FSAccess.MAKE_FIFO
             | FSAccess.MAKE_BLOCK | FSAccess.MAKE_SYM)
    if abi >= 2:  # without REFER handled, ABI 1 refuses every rename across folders
        write |= FSAccess.REFER
    if abi >= 3:  # else truncate() is not a write Landlock sees
        write |= FSAccess.TRUNCATE
    file_only = FSAccess.EXECUTE | FSAccess.WRITE_FILE | FSAccess.READ_FILE | FSAccess.TRUNCATE
    return FSAccess.READ_FILE | FSAccess.READ_DIR, write, file_only


def die_with_parent(parent: int | None) -> None:
    """The harness ends with whoever launched it (the panel, the CLI), as bubblewrap's --die-with-parent:
    the kernel's parent-death signal outlives exec. `parent`: the launcher's pid, which may have died
    before the signal was asked for."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        sys.exit(CANNOT_RUN)


def fence(reads: list[str], writes: list[str]) -> None:
    """Applies the ruleset to this process (and what it will exec); raises OSError or LandlockError."""
    import landlock

    ctypes.set_errno(0)  # the package reads errno after each call, and takes a stale one for a failure
    read, write, file_only = _rights(landlock.landlock_abi_version())
    ruleset = landlock.Ruleset(restrict_rules=read | write)

    def grant(path: str, rights) -> None:
        if not os.path.exists(path):
            return  # a PATH entry or device this machine lacks
        ctypes.set_errno(0)
        ruleset.allow(path, rules=rights if os.path.isdir(path) else rights & file_only)

    for path in reads:
        grant(path, read)
    for path in [*writes, *DEVICE_FOLDERS]:
        grant(path, read | write)
    for path in DEVICES:
        grant(path, read | (write & file_only))
    ctypes.set_errno(0)
    ruleset.apply()


def _restrict_tcp(ports: list[int]) -> bool:
    """False where the TCP rules exist but could not be applied: then nothing runs."""
    from swarm_panel.app.fence import landlock_net

    try:
        landlock_net.restrict_tcp(ports)
    except landlock_net.Unsupported as exc:  # the filesystem's ruleset holds; a kernel before 6.7 cannot hold TCP
        print(f"landlock_exec: warning: TCP is not fenced: {exc}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"landlock_exec: the Landlock TCP rules could not be applied: {exc}", file=sys.stderr)
        return False
    return True


def main(args: list[str] | None = None) -> int:
    options = _parser().parse_args(args)
    argv = options.argv[1:] if options.argv[:1] == ["--"] else options.argv
    if not argv:
        print("landlock_exec: no program given after --", file=sys.stderr)
        return CANNOT_RUN
    try:
        fence(options.read, [*options.write, *([options.tmp] if options.tmp else [])])
    except Exception as exc:  # noqa: BLE001 - whatever stops the ruleset, the harness must not run unfenced
        print(f"landlock_exec: the Landlock ruleset could not be applied: {exc}", file=sys.stderr)
        return CANNOT_FENCE
    if options.connect and not _restrict_tcp(options.connect):
        return CANNOT_FENCE
    die_with_parent(options.parent)
    env = dict(os.environ)
    if options.tmp:
        env["TMPDIR"] = options.tmp
    try:
        if options.chdir:
            os.chdir(options.chdir)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"landlock_exec: cannot run {argv[0]}: {exc}", file=sys.stderr)
        return CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
