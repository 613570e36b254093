"""Runs a command with the kernel key syscalls denied, as Docker's default seccomp profile does.

Usage: python3 no_keyctl.py PROGRAM [ARGS...]

Installs a seccomp filter (x86_64 only) that makes `add_key`, `request_key` and `keyctl` fail
with EPERM, then replaces itself with PROGRAM. Used by tests/it/headless.rs to show what `mint`
says with `MINT_KEYRING_BACKEND=keyutils` in a container that forbids the kernel keyring.
"""

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
AUDIT_ARCH_X86_64 = 0xC000003E
# struct seccomp_data: nr at offset 0, arch at offset 4.
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
DENIED = (248, 249, 250)  # add_key, request_key, keyctl on x86_64


def instruction(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def main():
    if platform.machine() != "x86_64" or len(sys.argv) < 2:
        sys.exit(125)
    program = [
        instruction(BPF_LD_W_ABS, 0, 0, 4),
        instruction(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        instruction(BPF_LD_W_ABS, 0, 0, 0),
    ]
    for n, nr in enumerate(DENIED):
        left = len(DENIED) - n
        # Equal: jump to the EPERM return after the remaining tests and the ALLOW.
        program.append(instruction(BPF_JEQ_K, left, 0, nr))
    program.append(instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    program.append(instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM))
    code = b"".join(program)
    buffer = ctypes.create_string_buffer(code)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(125)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(125)
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
