"""Route llama.cpp's log output into Python `logging` instead of stderr; initialise the backend once."""

from __future__ import annotations

import collections
import logging

import llama_cpp

logger = logging.getLogger("llama_cpp")

_GGML_LOG_LEVEL_WARN = 3
_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_CONT = 5

_recent_problems: collections.deque[str] = collections.deque(maxlen=8)
_partial: list[str] = []
_partial_level = 0
_initialised = False


def _forward(level: int, text: bytes | None, _user_data: object) -> None:
    global _partial_level
    if level != _GGML_LOG_LEVEL_CONT:
        _partial_level = level
    _partial.append((text or b"").decode("utf-8", errors="replace"))
    if not _partial[-1].endswith("\n"):
        return
    line = "".join(_partial).rstrip()
    _partial.clear()
    if _partial_level in (_GGML_LOG_LEVEL_WARN, _GGML_LOG_LEVEL_ERROR):
        _recent_problems.append(line)
    logger.debug("%s", line)


# ctypes would free the trampoline if nothing kept this reference.
_callback = llama_cpp.llama_log_callback(_forward)


def ensure_backend() -> None:
    """Silence llama.cpp's stderr logging and initialise its backend; safe to call repeatedly."""
    global _initialised
    if _initialised:
        return
    llama_cpp.llama_log_set(_callback, None)
    llama_cpp.llama_backend_init()
    _initialised = True


def take_recent_problems() -> list[str]:
    """Warnings and errors llama.cpp logged since the last call (at most the last 8)."""
    problems = list(_recent_problems)
    _recent_problems.clear()
    return problems
