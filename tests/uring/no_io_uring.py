#!/usr/bin/env python3
"""Run a program with io_uring forbidden, as a container runtime's default
seccomp profile does: a seccomp filter makes io_uring_setup, io_uring_enter
and io_uring_register fail with EPERM, then the program is exec'd.

    no_io_uring.py PROGRAM [ARGS...]

Used by tests/it/uring.rs to check that `--io auto` falls back to epoll.
"""
import ctypes
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
# io_uring_setup, io_uring_enter, io_uring_register: the same numbers on
# every architecture (the unified syscall table, Linux 5.1).
IO_URING_SYSCALLS = (425, 426, 427)

BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def program():
    n = len(IO_URING_SYSCALLS)
    # Load the syscall number (offset 0 of struct seccomp_data); each match
    # jumps to the EPERM return after the ALLOW.
    prog = [insn(BPF_LD_W_ABS, 0, 0, 0)]
    for i, nr in enumerate(IO_URING_SYSCALLS):
        prog.append(insn(BPF_JEQ_K, n - i, 0, nr))
    prog.append(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    prog.append(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM))
    return prog


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: no_io_uring.py PROGRAM [ARGS...]")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    insns = program()
    raw = ctypes.create_string_buffer(b"".join(insns))
    fprog = SockFprog(len(insns), ctypes.cast(raw, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        sys.exit("prctl(PR_SET_NO_NEW_PRIVS): errno %d" % ctypes.get_errno())
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        sys.exit("prctl(PR_SET_SECCOMP): errno %d" % ctypes.get_errno())
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
