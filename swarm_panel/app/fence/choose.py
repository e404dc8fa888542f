"""Which fence runs launches here, and the command line it puts around a harness.

Bubblewrap first: its mounts hide the home and /tmp outright and give the harness a /tmp of its own. Landlock
where bubblewrap cannot run. None, with each probe's reason, where neither works: the launcher then refuses
to launch unless the user opted in to running unfenced (and always, where a fence was named).
"""

from __future__ import annotations

from pathlib import Path

from swarm_panel.app.fence import bwrap, landlock
from swarm_panel.app.fence.network import NetPlan
from swarm_panel.app.fence.walls import AUTO, BWRAP, INSTALL_HINT, LANDLOCK, NONE, Fence, Walls

CHOICES = (AUTO, BWRAP, LANDLOCK)


def detect(prefer: str = AUTO, *, bwrap_executable: str | None = None) -> Fence:
    """The fence `prefer` names (auto: bubblewrap, else Landlock) if it works here, else none with why."""
    if prefer not in CHOICES:
        raise ValueError(f"the fence must be one of {', '.join(CHOICES)}, not {prefer!r}")
    reasons = []
    if prefer in (AUTO, BWRAP):
        path, why = bwrap.probe(bwrap_executable)
        if path is not None:
            return Fence(BWRAP, path, asked=prefer)
        reasons.append(why)
    if prefer in (AUTO, LANDLOCK):
        why = landlock.probe()
        if not why:
            return Fence(LANDLOCK, asked=prefer)
        reasons.append(why)
    return Fence(NONE, reason=f"{'; '.join(reasons)}; {INSTALL_HINT}", asked=prefer)


def wrap(fence: Fence, argv: list[str], walls: Walls, cwd: Path, *, home: Path | None = None,
         net: NetPlan | None = None) -> list[str]:
    """`argv` run in `cwd` inside the fence (unchanged without one). `home`: the user's own home, to hide.
    `net`: what it may reach over the network (app.fence.network); None: the host's network."""
    if fence.kind == BWRAP:
        return bwrap.command(fence.executable or "bwrap", argv, walls, cwd, home, net=net)
    if fence.kind == LANDLOCK:
        return landlock.command(argv, walls, cwd, home, connect=net.ports if net is not None else ())
    return list(argv)
