"""Runs a command on a kernel that seems to have no Landlock: a seccomp filter answers its three system
calls (444-446, the same numbers on x86_64 and aarch64) with ENOSYS, as a kernel built without it does.
CI uses it to check that the README's test command passes where no fence can run.

python .ci/without_landlock.py COMMAND [ARG...]
"""

import ctypes
import errno
import os
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
LANDLOCK_CALLS = (444, 445, 446)
LOAD_NR, JUMP_IF_EQUAL, RETURN = 0x20, 0x15, 0x06
ALLOW, FAIL_WITH = 0x7FFF0000, 0x00050000


class Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]


def main() -> None:
    calls = len(LANDLOCK_CALLS)
    code = [Instruction(LOAD_NR, 0, 0, 0)]
    code += [Instruction(JUMP_IF_EQUAL, calls - i, 0, nr) for i, nr in enumerate(LANDLOCK_CALLS)]
    code += [Instruction(RETURN, 0, 0, ALLOW), Instruction(RETURN, 0, 0, FAIL_WITH | errno.ENOSYS)]
    array = (Instruction * len(code))(*code)
    program = Program(len(code), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                                                                   ctypes.byref(program), 0, 0):
        sys.exit(f"without_landlock: seccomp refused the filter: {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
