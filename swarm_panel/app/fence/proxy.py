"""The proxy an agent with the network opt-in reaches the internet through: HTTP CONNECT (HTTPS, any TCP) and
plain HTTP requests in absolute form, to public addresses only.

A destination's name is resolved here, every address it resolves to is checked (none may be loopback,
private, link-local, shared, reserved or multicast: the host's own services and its network's stay out of
reach), and the connection goes to the address checked, so a name that resolves elsewhere a moment later
(DNS rebinding) changes nothing. Refusals are HTTP answers the client can show: 403 with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket

from swarm_panel.app.fence.splice import splice

log = logging.getLogger(__name__)

HEAD_LIMIT = 64 * 1024  # a request line and headers; more is not a proxy request
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"keep-alive")


class Refused(Exception):
    """The destination is not on the internet, or cannot be reached; the message says which."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def refusal(address: str) -> str | None:
    """Why the proxy will not connect to `address` (an IP), or None where it will."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return f"{ip} is this machine's loopback"
    if ip.is_link_local:
        return f"{ip} is link-local"
    if ip.is_multicast:
        return f"{ip} is multicast"
    if ip.is_private or not ip.is_global:
        return f"{ip} is a private or reserved address, not the internet"
    return None


async def resolve(host: str, port: int) -> str:
    """The address to connect to for host:port, every address the name has checked first; raises Refused."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(502, f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise Refused(502, f"{host} has no address")
    for address in addresses:
        why = refusal(address)
        if why:
            raise Refused(403, f"{host} is not on the internet: {why}")
    return addresses[0]


def _split_target(target: str, default_port: int) -> tuple[str, int]:
    host, port = target, default_port
    if target.startswith("["):  # [IPv6]:port
        host, _, rest = target[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif target.count(":") == 1:
        host, _, text = target.partition(":")
        port = int(text)
    if not host or not 0 < port < 65536:
        raise ValueError(target)
    return host, port


def _parse(head: bytes) -> tuple[str, int, bytes | None]:
    """(host, port, the head to send upstream: None for CONNECT) of a proxy request; ValueError else."""
    lines = head.split(b"\r\n")
    method, target, version = lines[0].decode("latin-1").split(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(version)
    if method == "CONNECT":
        host, port = _split_target(target, 443)
        return host, port, None
    if not target.startswith("http://"):
        raise ValueError("only CONNECT or an absolute http:// URL")
    authority, slash, path = target[len("http://"):].partition("/")
    host, port = _split_target(authority, 80)
    kept = [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
    return host, port, b"\r\n".join([f"{method} {slash}{path} {version}".encode(), *kept])


class Proxy:
    """Listens on 127.0.0.1 (any free port) until closed."""

    def __init__(self) -> None:
        self.port: int | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            try:
                host, port, upstream_head = _parse(head[:-4])
            except ValueError:
                raise Refused(400, "not a proxy request: CONNECT host:port, or an absolute http:// URL") from None
            address = await resolve(host, port)
            try:
                upstream = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                raise Refused(502, f"cannot connect to {host}:{port}: {exc}") from None
        except Refused as exc:
            log.info("proxy refused a request: %s", exc)
            await _answer(writer, exc.status, str(exc))
            return
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.close()
            return
        if upstream_head is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(upstream_head + b"\r\n\r\n")
        await splice((reader, writer), upstream)


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (message + "\n").encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()
