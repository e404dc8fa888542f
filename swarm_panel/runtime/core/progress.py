"""Start-up progress: each stage of building an engine, named, with how far along it is where known.

A first launch copies the bundled model, probes the CPU, loads the weights and starts the engine
thread; each stage reports here, so the panel and the log can say what is happening meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

# (what is happening, the fraction done or None where it cannot be told)
Progress = Callable[[str, float | None], None]


def no_progress(stage: str, fraction: float | None) -> None:
    """Progress nobody watches."""
