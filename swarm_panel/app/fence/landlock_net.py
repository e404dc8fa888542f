"""Landlock's TCP rules (ABI 4, Linux 6.7 and later): a ruleset of its own that handles only binding and
connecting TCP sockets, stacked on the filesystem one (each ruleset applied restricts further), so the
process may bind no TCP port and connect only to the ports given (the endpoint's, the proxy's).

The rules name ports, not addresses: a port allowed is allowed on every host. UDP and Unix sockets are not
TCP and pass (an abstract Unix socket is ABI 6's scoping, a pathname one is the filesystem's to hide).
The `landlock` package has no network rules, so these are the raw system calls.
"""

from __future__ import annotations

import ctypes
import os
import struct

# The same numbers on every architecture (the generic syscall table, since Linux 5.13).
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_NET_PORT = 2
ACCESS_NET_BIND_TCP, ACCESS_NET_CONNECT_TCP = 1, 2
NET_ABI = 4
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


class Unsupported(OSError):
    """The kernel has no Landlock TCP rules (its ABI is below 4)."""


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 where it has none (or has it disabled)."""
    try:
        return _call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except OSError:
        return 0


def restrict_tcp(ports: list[int]) -> None:
    """This process (and what it execs) may bind no TCP port and connect to no other TCP port than `ports`.
    Raises Unsupported where the kernel has no TCP rules, OSError where they could not be applied."""
    abi = abi_version()
    if abi < NET_ABI:
        raise Unsupported(f"the kernel's Landlock ABI is {abi}; TCP rules need {NET_ABI} (Linux 6.7)")
    handled = ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
    # struct landlock_ruleset_attr's first two fields (handled_access_fs: none here, handled_access_net).
    attr = ctypes.create_string_buffer(struct.pack("=QQ", 0, handled))
    fd = _call(SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    try:
        for port in sorted(set(ports)):
            if not 0 < port < 65536:
                raise ValueError(f"not a TCP port: {port}")
            rule = ctypes.create_string_buffer(struct.pack("=QQ", ACCESS_NET_CONNECT_TCP, port))
            _call(SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(RULE_NET_PORT), rule, ctypes.c_uint32(0))
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"no_new_privs: {os.strerror(err)}")
        _call(SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0))
    finally:
        os.close(fd)
