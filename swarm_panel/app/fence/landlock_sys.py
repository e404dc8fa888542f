"""The kernel's Landlock interface through its three system calls (ctypes, no package): the ABI version, a
ruleset of handled filesystem and network rights and scopes, its path and port rules, and applying it.

Values from the kernel's include/uapi/linux/landlock.h; the system call numbers are the same on every
architecture Linux gives them to (x86_64, aarch64, riscv64...). Each right exists from an ABI on (ABI 2
REFER, 3 TRUNCATE, 4 the TCP rights, 5 IOCTL_DEV, 6 the scopes): `handled()` keeps those this kernel knows.
"""

from __future__ import annotations

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (handled_access_fs).
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
# Network rights (handled_access_net, ABI 4) and scopes (ABI 6).
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

FS_SINCE = {REFER: 2, TRUNCATE: 3, IOCTL_DEV: 5}  # the rest: ABI 1
NET_SINCE, SCOPES_SINCE = 4, 6
# The rights that mean something on a file (a rule on a file may grant no others).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class LandlockUnavailable(OSError):
    """This kernel (or its configuration) has no Landlock, or refused a ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(number: int, *args) -> int:
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        error = ctypes.get_errno()
        raise LandlockUnavailable(error, os.strerror(error))
    return result


def abi_version() -> int:
    """The Landlock ABI this kernel speaks (1 on Linux 5.13, 7 on 6.15...); LandlockUnavailable where none."""
    return _call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))


def handled(fs: int, abi: int) -> int:
    """The filesystem rights of `fs` that a kernel of this ABI knows."""
    return fs & ~sum(right for right, since in FS_SINCE.items() if abi < since)


def no_new_privs() -> None:
    """No exec from here on gains a privilege (setuid, file capabilities): Landlock's condition for a
    process without CAP_SYS_ADMIN, and a rule of the fence for one with it."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"PR_SET_NO_NEW_PRIVS: {os.strerror(error)}")


class Ruleset:
    """A ruleset handling `fs`, `net` and `scoped` (each already cut to this ABI); rules grant back."""

    def __init__(self, abi: int, fs: int, net: int = 0, scoped: int = 0) -> None:
        if (net and abi < NET_SINCE) or (scoped and abi < SCOPES_SINCE):
            raise LandlockUnavailable(0, f"Landlock ABI {abi} has no network rights or scopes")
        self.fs, self.net = fs, net
        attr = _RulesetAttr(fs, net, scoped)
        # The struct as long as this ABI knows it: an older kernel refuses a longer one's unknown fields.
        size = 24 if abi >= SCOPES_SINCE else 16 if abi >= NET_SINCE else 8
        self.fd = _call(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))

    def allow_path(self, path: str, access: int) -> None:
        """`access` beneath `path` (only file rights on a file); a path that is not there is skipped."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if not os.path.isdir(path):
                access &= FILE_RIGHTS
            attr = _PathBeneathAttr(access & self.fs, fd)
            if attr.allowed_access:
                _call(SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(attr),
                      ctypes.c_uint32(0))
        finally:
            os.close(fd)

    def allow_port(self, port: int, access: int) -> None:
        """`access` (NET_BIND_TCP, NET_CONNECT_TCP) on TCP port `port`."""
        attr = _NetPortAttr(access & self.net, port)
        _call(SYS_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(RULE_NET_PORT), ctypes.byref(attr),
              ctypes.c_uint32(0))

    def restrict_self(self) -> None:
        """This thread, and all it will start or exec, is held by the ruleset from here on."""
        try:
            no_new_privs()
            _call(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))
        finally:
            os.close(self.fd)
