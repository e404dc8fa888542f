"""What one fenced agent reaches over the network: the endpoint, and with the opt-in the internet through the
proxy (app.fence.proxy), nothing else of the host (its other loopback services, its abstract Unix sockets).

- Bubblewrap: the agent gets a network namespace of its own (only its own loopback). For each port it may
  reach, the launcher listens on a Unix socket in a folder bound into the sandbox and relays each
  connection to that port on the host's 127.0.0.1; inside, the bridge (app.fence.bridge) listens on
  127.0.0.1 at the same port and forwards to the socket. The harness's URLs do not change.
- Landlock: the same host network, but a TCP ruleset lets the agent connect to those ports only, and bind
  none (landlock_exec --connect; Linux 6.7 and later).
With the opt-in, the proxy's address is set as HTTP(S)_PROXY and ALL_PROXY (the endpoint stays direct:
NO_PROXY): a program that ignores those variables has no network. The user's own proxy variables are never
passed on: that proxy is not reachable from inside.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from swarm_panel.app.fence.proxy import Proxy
from swarm_panel.app.fence.splice import splice
from swarm_panel.app.fence.walls import BWRAP, LANDLOCK

SEEN = Path("/tmp/swarm-panel-net")  # where bubblewrap shows the relays' folder (its own /tmp)
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy")
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True, slots=True)
class NetPlan:
    """The ports on the host's 127.0.0.1 an agent may reach, and (bubblewrap) the folder of their relays."""

    ports: tuple[int, ...]
    sockets: Path | None = None

    def forwards(self) -> dict[int, str]:
        """Each port's socket as the harness sees it (bubblewrap)."""
        return {port: str(SEEN / f"{port}.sock") for port in self.ports}


async def _relay(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        upstream = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        writer.close()
        return
    await splice((reader, writer), upstream)


class AgentNetwork:
    """One launch's relays and proxy, on the launcher's loop; `close` once the agent has ended."""

    def __init__(self, plan: NetPlan, env: dict[str, str], servers: list[asyncio.Server], proxy: Proxy | None) -> None:
        self.plan = plan
        self.env = env
        self._servers = servers
        self._proxy = proxy

    @classmethod
    async def open(cls, fence: str, server_url: str, *, internet: bool = False) -> AgentNetwork | None:
        """The network of an agent in `fence` (BWRAP or LANDLOCK; None for no fence) against the server at
        `server_url`, with the internet through the proxy if asked. Raises ValueError for a server that is
        not on this machine's loopback (no fence could let the agent reach it alone)."""
        if fence not in (BWRAP, LANDLOCK):
            return None
        url = urlsplit(server_url)
        if url.hostname not in LOOPBACK_NAMES or url.port is None:
            raise ValueError(f"a fenced agent reaches only a server on 127.0.0.1 with its port, not {server_url}")
        proxy = await Proxy().start() if internet else None
        ports = (url.port, *([proxy.port] if proxy else []))
        values = {"no_proxy": ",".join(LOOPBACK_NAMES)}
        if proxy is not None:
            values |= dict.fromkeys(("http_proxy", "https_proxy", "all_proxy"), f"http://127.0.0.1:{proxy.port}")
        env = values | {name.upper(): value for name, value in values.items()}  # programs read one or the other
        if fence == LANDLOCK:
            return cls(NetPlan(ports), env, [], proxy)
        folder = Path(tempfile.mkdtemp(prefix="swarm-panel-net-"))  # 0700; short enough for a socket's path
        servers = []
        try:
            for port in ports:
                servers.append(await asyncio.start_unix_server(functools.partial(_relay, port),
                                                               str(folder / f"{port}.sock")))
        except OSError:
            await cls(NetPlan(ports, folder), env, servers, proxy).close()
            raise
        return cls(NetPlan(ports, folder), env, servers, proxy)

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        """The harness's environment: the user's proxy variables out, this network's in."""
        return {k: v for k, v in env.items() if k.lower() not in PROXY_VARIABLES} | self.env

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        if self._proxy is not None:
            await self._proxy.close()
        if self.plan.sockets is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.plan.sockets)
