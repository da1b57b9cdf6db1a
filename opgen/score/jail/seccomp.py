"""``seccomp``: two BPF filters (assembled in :mod:`.bpf`), an allowlist of system calls.

The shared filter is installed on the worker once its set-up is done (the last step), so the zygote
and every child inherit it: only the calls CPython, the worker and the zygote need pass (x86-64 and
aarch64 tables), ``clone`` without namespace flags, ``unshare``/``setns`` with ``CLONE_NEWPID`` only
(the zygote's fresh namespace; a child holds no capability for it), ``clone3`` gets ``ENOSYS``,
``mount``/``umount2`` for the worker's work area; another architecture's calls kill. Each child adds
its own on top before model code: signals only to itself, no namespace or mount call.
"""

from __future__ import annotations

import os

from . import bpf
from .base import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, Jail, Mechanism

RISK = ("execve, sockets, SysV IPC, ptrace, process_vm_readv/writev and namespace or mount calls are not refused "
        "(a binary written by the program can run; shared memory can pass answers between responses where no "
        "IPC namespace is in force)")


def setup(jail: Jail) -> bool:
    """The serving worker: assemble both filters, prepare what a child needs to add its own (a child
    reaches ctypes' C types only: the zygote empties ctypes' namespace), and probe that it works: a
    forked probe installs them and must be refused a socket."""
    import ctypes  # the worker's own, loaded once (Jail.lib)

    jail.machine = os.uname().machine
    program = bpf.seccomp_program(jail.machine, allow_mount=True)
    if program is None:  # an architecture without a table: no filter, so no 'full'
        return False
    buffer = ctypes.create_string_buffer(program, len(program))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
    jail.prctl, jail.filter_addr = jail.lib().prctl, ctypes.addressof(fprog)
    jail.keep(buffer, fprog)
    child_size = len(bpf.child_seccomp_program(jail.machine, 1) or b"")
    jail.child_filter = (ctypes.c_char * child_size, Fprog, ctypes.addressof)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if _install(jail) and child(jail, os.getpid(), 0):
                import socket

                try:
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    code = 2
                except PermissionError:
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    works = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if not works:
        jail.prctl = None
    return works


def _install(jail: Jail) -> bool:
    if jail.prctl is None:
        return False
    return (jail.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            and jail.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, jail.filter_addr, 0, 0) == 0)


def install(jail: Jail) -> bool:
    """The worker's last step: from here on neither it nor anything it forks can make a denied call."""
    return bool(jail.report.get("seccomp")) and _install(jail)


def child(jail: Jail, pid: int, cpu_s: int) -> bool:
    """A child, last before model code: its own filter on top (signals only to ``pid``, its own pid:
    1 in a PID namespace of its own)."""
    if jail.prctl is None:
        return True  # no seccomp in force: the level says so
    program = bpf.child_seccomp_program(jail.machine, pid)
    if program is None:
        return False
    buffer_type, fprog_type, addressof = jail.child_filter
    buffer = buffer_type.from_buffer_copy(program)
    fprog = fprog_type(len(program) // 8, addressof(buffer))
    return jail.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, addressof(fprog), 0, 0) == 0


MECHANISM = Mechanism("seccomp", "seccomp", RISK, steps=(setup, install, child))
