"""The panel's generated key on disk, one file per port, so a CLI on the same machine (chaos, benchmarks) can
steer the server the user started without --api-key.

The folder is the user's data folder (`keys/` under platformdirs' user data path; SWARM_PANEL_KEYS overrides
it): under the home, which both fences hide from agents, unlike the runtime folder /run/user/UID that
Landlock leaves readable. Each file is written 0600 in a 0700 folder.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs

log = logging.getLogger(__name__)

ENV = "SWARM_PANEL_KEYS"


def folder() -> Path:
    override = os.environ.get(ENV)
    return Path(override) if override else platformdirs.user_data_path("swarm-panel") / "keys"


def path_for(port: int) -> Path:
    return folder() / f"{port}.key"


def write(port: int, key: str) -> None:
    """Publishes the key for `port`; a folder that cannot be written leaves only the in-process panel with it."""
    target = path_for(port)
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a file left by an earlier server may have had other bits
            handle.write(key)
    except OSError as exc:
        log.warning("the panel's key for port %d is not published (%s): only this process can steer the server",
                    port, exc)


def remove(port: int) -> None:
    path_for(port).unlink(missing_ok=True)


def read(url: str) -> str | None:
    """The key a server at `url` (on this machine) published, or None."""
    port = urlsplit(url).port
    if port is None:
        return None
    try:
        return path_for(port).read_text().strip() or None
    except OSError:
        return None
