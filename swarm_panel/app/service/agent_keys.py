"""Who a request's key says it comes from: the panel (the user, their own clients), or one launched agent.

A launched agent gets a key of its own (`issue`), revoked when it ends; the server serves whatever that key
sends as that agent, on the inference routes only. The panel's key steers the server (the scheduler and
its policy): the user's --api-key where one is set, else a key made here at start, which the panel holds
in-process and a CLI on the same machine reads from a file only the user can read (app.service.panel_key_file).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

KEY_BYTES = 32
PANEL, AGENT, NO_KEY, UNKNOWN = "panel", "agent", "no key", "unknown key"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a key names: PANEL, AGENT (with the agent's name), NO_KEY or UNKNOWN."""

    kind: str
    agent: str | None = None


def _digest(key: str) -> bytes:
    # Looked up by digest: a dict probe on the secret itself could leak its bytes through timing.
    return hashlib.sha256(key.encode()).digest()


class AgentKeys:
    """The panel's key and the keys handed to launched agents; thread-safe (the launcher's loop issues,
    the server's loop checks)."""

    def __init__(self, user_key: Callable[[], str | None] = lambda: None) -> None:
        self._user_key = user_key
        self.generated = secrets.token_urlsafe(KEY_BYTES)
        self._lock = threading.Lock()
        self._agents: dict[bytes, str] = {}

    @property
    def user_set(self) -> bool:
        """Whether the user set --api-key: then every route needs a key, theirs or an agent's."""
        return bool(self._user_key())

    @property
    def panel_key(self) -> str:
        return self._user_key() or self.generated

    def issue(self, name: str) -> str:
        """A new key that is good for `name`'s inference until revoked."""
        key = secrets.token_urlsafe(KEY_BYTES)
        with self._lock:
            self._agents[_digest(key)] = name
        log.info("issued agent %s its key", name)
        return key

    def revoke(self, key: str) -> None:
        with self._lock:
            name = self._agents.pop(_digest(key), None)
        if name is not None:
            log.info("revoked agent %s's key", name)

    def names(self) -> set[str]:
        """The agents holding a key now: their names need it."""
        with self._lock:
            return set(self._agents.values())

    def caller(self, key: str | None) -> Caller:
        if not key:
            return Caller(NO_KEY)
        if hmac.compare_digest(key.encode(), self.panel_key.encode()):
            return Caller(PANEL)
        with self._lock:
            name = self._agents.get(_digest(key))
        return Caller(AGENT, name) if name is not None else Caller(UNKNOWN)
