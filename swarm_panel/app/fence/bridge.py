"""The small program bubblewrap starts in an agent's own network namespace: it listens on 127.0.0.1 at each
port it is given and forwards every connection to that port's Unix socket (bound in from the launcher, whose
relay takes it on to the server or the proxy), starts the harness as its child and exits with its status.

So the harness keeps its base URL http://127.0.0.1:PORT/agents/NAME, and the only way out of the namespace
is the sockets the launcher chose: the bridge itself reaches nothing else.

It is the sandbox's pid 1 (bwrap --as-pid-1): it reaps every orphan, and when it exits the kernel ends every
process left. It holds what the harness's seccomp filter refuses (Unix sockets, the host's visible ones
too), so it is the one process there without the filter, and the harness may not trace it or write its
memory (lockdown.undumpable): bwrap's own pid 1 would be a second such process, open to both.

`bridge --forward PORT=SOCKET... -- ARGV`. It exits 126 where it cannot be made untraceable, 127 where ARGV
cannot be run, else with the harness's status; a stop's signals are passed on to the harness, which ends
first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import signal
import sys

from swarm_panel.app.fence.lockdown import undumpable
from swarm_panel.app.fence.program import exec_prefix
from swarm_panel.app.fence.reaper import reap_ready
from swarm_panel.app.fence.splice import splice

CANNOT_FENCE, CANNOT_RUN = 126, 127
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How a frozen app's executable is told to be the bridge (see packaging/entry.py).
FROZEN_FLAG = "--fence-bridge"


def command(forwards: dict[int, str], argv: list[str]) -> list[str]:
    """`argv` started by the bridge, which forwards each 127.0.0.1 port to its socket (as the harness sees it)."""
    options = [word for port, path in sorted(forwards.items()) for word in ("--forward", f"{port}={path}")]
    return [*exec_prefix("swarm_panel.app.fence.bridge", FROZEN_FLAG), *options, "--", *argv]


def _forward(text: str) -> tuple[int, str]:
    port, sep, path = text.partition("=")
    if not sep or not port.isdigit() or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: PORT=SOCKET expected")
    return int(port), path


async def _carry(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        upstream = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    await splice((reader, writer), upstream)


async def run(forwards: list[tuple[int, str]], argv: list[str]) -> int:
    servers = []
    for port, path in forwards:
        try:
            servers.append(await asyncio.start_server(functools.partial(_carry, path), "127.0.0.1", port))
        except OSError as exc:  # a port below 1024 needs a capability the sandbox has not: that way stays shut
            print(f"bridge: warning: cannot listen on 127.0.0.1:{port}, so the harness cannot reach it: {exc}",
                  file=sys.stderr)
    try:
        # Not asyncio's: its watcher waits for its own child only, and pid 1 must reap every orphan (_reap).
        pid = os.posix_spawnp(argv[0], argv, os.environ)  # noqa: ASYNC221 - a spawn returns once exec'd
    except OSError as exc:
        print(f"bridge: cannot run {argv[0]}: {exc}", file=sys.stderr)
        return CANNOT_RUN
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_signal_handler(signal.SIGCHLD, functools.partial(_reap, pid, ended))
    _reap(pid, ended)  # it may have ended before the handler was there
    for signum in FORWARDED_SIGNALS:
        loop.add_signal_handler(signum, functools.partial(_pass_on, pid, signum))
    code = await ended
    for server in servers:
        server.close()
    return code if code >= 0 else 128 - code  # a signal's death, as a shell reports it


def _reap(harness: int, ended: asyncio.Future) -> None:
    """As pid 1 every orphan of the sandbox is its child: each that ended is reaped, the harness's status kept."""
    for pid, status in reap_ready():
        if pid == harness and not ended.done():
            ended.set_result(os.waitstatus_to_exitcode(status))


def _pass_on(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bridge", description=__doc__)
    parser.add_argument("--forward", action="append", type=_forward, default=[], help="PORT=SOCKET")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    options = parser.parse_args(args)
    argv = options.argv[1:] if options.argv[:1] == ["--"] else options.argv
    if not argv:
        print("bridge: no program given after --", file=sys.stderr)
        return CANNOT_RUN
    try:
        undumpable()
    except OSError as exc:
        print(f"bridge: the fence could not be made: {exc}", file=sys.stderr)
        return CANNOT_FENCE
    return asyncio.run(run(options.forward, argv))


if __name__ == "__main__":
    sys.exit(main())
