"""The server's key off the command line.

/proc/PID/cmdline can be read by every process of the machine: by a fenced agent too, where Landlock runs
without a pid namespace of its own (docs/agents.md). `--api-key` is the panel's key, the one that steers the
scheduler. So a process given it there execs itself again at once, with the key moved into its environment
(SWARM_PANEL_API_KEY, which the settings read like a user's own export). /proc/PID/environ can be read only
by a process allowed to trace this one, and no fence allows that.
"""

from __future__ import annotations

import logging
import os

from swarm_panel.app.supervisor.supervise import own_command

log = logging.getLogger(__name__)

FLAG = "--api-key"
ENV = "SWARM_PANEL_API_KEY"
# argparse takes any unambiguous abbreviation of a long flag; none of ours but --api-key starts with --api.
SHORTEST = len("--api")


def _is_flag(word: str) -> bool:
    return len(word) >= SHORTEST and FLAG.startswith(word)


def without_key(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` with each `--api-key KEY` and `--api-key=KEY` taken out, and the key argparse would keep (the last)."""
    kept: list[str] = []
    key = None
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":  # past it nothing is an option
            kept += argv[i:]
            break
        name, equals, value = word.partition("=")
        if equals and _is_flag(name):
            key = value
            i += 1
        elif not equals and _is_flag(word) and i + 1 < len(argv):
            key = argv[i + 1]
            i += 2
        else:
            kept.append(word)
            i += 1
    return kept, key


def hide_key(argv: list[str]) -> None:
    """Execs this program again with `argv`'s key in its environment instead; returns where there is none."""
    kept, key = without_key(argv)
    if key is None:
        return
    command = own_command(kept)
    log.debug("moving --api-key off the command line into %s", ENV)
    os.execve(command[0], command, dict(os.environ, **{ENV: key}))
