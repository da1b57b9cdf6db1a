"""A sandbox worker: a warm process that forks one isolated child per request and runs model code there.

This file runs as a standalone script (``python -I -S worker.py ARGS``) and imports only the standard
library, so a worker starts in milliseconds and its children inherit nothing of the scorer: no
environment, no open files, no expected answers (the worker never receives them).

Jail once, fork many: the worker sets up its isolation once, at start, and every child forks from
its clean zygote (forked before the first request, never given a request's bytes; see "the clean
zygote" below), each into a PID namespace of its own. Each step is taken only when the system
allows it (what was obtained is reported back in the hello message, so the scorer can state the
level and refuse a weak one):

- without root, a user namespace first (the only way an ordinary account gets the others; the
  children then keep the scorer's uid outside, with every capability dropped);
- a PID namespace whose init is this worker, so that after every request ``kill(-1)`` removes
  whatever the program forked, double-forked or daemonised;
- network, IPC and UTS namespaces (no network, no SysV IPC or POSIX message queue shared with
  the machine or surviving the worker) and a mount namespace with a private read-only tmpfs that
  the worker ``chroot``s into: model code sees no file of the machine at all;
- a work area on a tmpfs (``noexec,nosuid,nodev,noatime`` with byte and inode caps): one
  directory ``r`` for the requests; a request that changes anything (an entry made or removed,
  a mode, a time, the area's root) gets the tmpfs unmounted and remade: nothing written survives
  it, its inode counter carries nothing, and cleanup cannot fail;
- last, on the worker itself (so the zygote and every child inherit it at no cost): a seccomp
  ALLOWLIST (x86-64 and aarch64 tables; no ``execve``, socket, SysV IPC, ptrace, process_vm_*,
  namespace call but the zygote's CLONE_NEWPID; other architectures' calling conventions kill).
  ``mount``/``umount2`` stay for the worker's work area; children cannot use them (no capability:
  a uid of their own, or every capability dropped in a user namespace), and each child adds a
  filter of its own: signals only to itself, no namespace or mount call;
- in the zygote, before the first request: the import allowlist (ALLOWED_IMPORTS);
- per child: its own session and process group, when we are root a uid/gid of this worker's own
  (``UID_BASE`` + the host pid of the worker's first stage: unique among live workers, owner of no
  file), so that ``RLIMIT_NPROC`` binds, counts only this worker's children — a fork bomb in one
  worker cannot starve another scorer's children — and root-owned files are out of reach; rlimits on CPU, address
  space, file size, open files and processes; a private working directory; stdin/stdout/stderr on
  /dev/null; every inherited descriptor closed except the result pipe.

Protocol (worker <-> scorer, over stdin/stdout, trusted; defined once, in "the wire protocol"
below, which the scorer imports from this file): 4-byte big-endian length + ``marshal`` payload.
The worker's first message is ``("hello", isolation)``. A request is ``(units, timeout_s,
budget_s)`` (``budget_s``: one wall-clock and CPU budget for all calls of the request, i.e. of one
response) with
``units = [(code, [(entry, args), ...], fail_fast), ...]``
(``code``: the marshalled code the scorer compiled, which the child unmarshals (the zygote it forks
from never sees a request: see "the clean zygote"), or source text for the child to compile);
the reply is a list of ``(status, value, detail)``, one per call, in order.
Child -> worker (hostile): frames of 1 status byte + 4-byte sender pid + 4-byte length + UTF-8
payload, parsed defensively by the worker (bounded reads, caps on values and details applied
here, not in the child; frames past the last call ignored; a malformed frame ends that child
with ``killed``); frames from any pid but the child's are dropped, so a child can only ever lie
about its own result.
"""

from __future__ import annotations

import builtins
import marshal
import os
import re
import resource
import select
import signal
import struct
import sys
import time

# Modules model code commonly imports: loaded before the chroot, after which nothing can be read
# from disk (an import of anything else fails inside the sandbox, as it should).
# Each module makes every fork a little slower (more pages to map), so the list stays short.
PRELOAD = ("bisect", "collections", "collections.abc", "functools", "heapq", "itertools", "math", "operator", "re",
           "string", "unicodedata")

# Model code shares this interpreter and may replace builtins (``builtins.len = ...``); module-level
# bindings are looked up before builtins, so the harness keeps the real ones. (Type checkers take
# a name ``TYPE_CHECKING`` as true and skip the rebinding: to them these stay the builtins. The
# worker imports no ``typing``: it would cost every worker start.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any
else:
    len, isinstance, type, enumerate, range, max, str, bytes, memoryview, compile, exec = (
        len, isinstance, type, enumerate, range, max, str, bytes, memoryview, compile, exec)
_loads = marshal.loads  # likewise: a program may replace the module's attribute

# ------------------------------------------------------------------ the wire protocol (its one home)
#
# This file runs as a standalone script (``python -I -S``: no opgen, not even its own directory, on
# the path), so the protocol lives here and the scorer's end (opgen/score/sandbox.py) imports it from
# this module. tests/test_sandbox_wire.py ties the two ends.

# scorer <-> worker (trusted): one message = a 4-byte big-endian length, then a ``marshal`` payload.
MESSAGE_HEADER = struct.Struct(">I")
HELLO = "hello"  # the tag of the worker's first message, ``(HELLO, isolation)``
# The hello's mechanisms, in the order the scorer lists them (the isolation dict holds these, plus
# ``uid``, ``work_bytes``, ``work_inodes`` and ``nproc``). What each means to the scorer (what ``full``
# needs, the risk without it) is its description in opgen/score/sandbox.py ``ISOLATION``.
MECHANISMS = ("uid_drop", "userns", "pidns", "netns", "ipcns", "utsns", "mountns", "chroot", "worktmpfs", "seccomp",
              "nondumpable", "zygote", "freshpidns", "imports", "hiddenclasses")
# The worker's argv after the script's path: these limits, in this order, then NAMESPACES (0|1) and
# ROOT_DIR (see main()).
LIMIT_ARGS = ("as_bytes", "fsize_bytes", "nofile", "nproc", "max_output", "work_bytes", "work_inodes")

# child -> worker (hostile): one frame = status code (1 byte), sender pid (4), payload length (4),
# big-endian, then the UTF-8 payload. Code 0 ("loaded") reports a unit loaded; the others are the
# results a reply carries (RESULTS).
FRAME_HEADER = struct.Struct(">BII")
STATUSES = ("loaded", "ok", "syntax", "missing_name", "arity", "exception", "timeout", "memory",
            "output_too_large", "killed", "not_a_string")
RESULTS = STATUSES[1:]
_CODE = {name: i for i, name in enumerate(STATUSES)}
# A detail longer than this is cut by the worker (the child's own cap is CHILD_DETAIL_CAP, plus a
# prefix such as "while defining: ").
DETAIL_CAP = 600
CHILD_DETAIL_CAP = 500
# A child's recursion limit: the library's recursive operators recurse once per character (its one
# home: `opgen ops check` checks operators under it, opgen.opscheck reads it from here).
CHILD_RECURSION_LIMIT = 20_000


def encode_message(obj: Any) -> bytes:
    """One scorer <-> worker message: the header, then ``obj`` marshalled."""
    data = marshal.dumps(obj)
    return MESSAGE_HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def make_request(units: list, timeout_s: float, budget_s: float | None) -> tuple:
    """A request: ``units = [(code, [(entry, args), ...], fail_fast), ...]``, each call's wall-clock
    limit, and one budget for all of them (None: the worker's default)."""
    return (units, timeout_s, budget_s)


def read_request(request: tuple) -> tuple[list, float, float | None]:
    """``make_request``'s fields back (a request without a budget has the worker's default)."""
    return request[0], request[1], request[2] if len(request) > 2 else None


def encode_frame(status: str, pid: int, payload: str) -> bytes:
    """One child -> worker frame."""
    data = payload.encode("utf-8", "surrogatepass")
    return FRAME_HEADER.pack(_CODE[status], pid, len(data)) + data


def frame_cap(max_output: int) -> int:
    """The largest frame payload the worker reads: an ``ok`` value of ``max_output`` characters
    (4 UTF-8 bytes each at most) or a detail; a longer frame is malformed."""
    return max_output * 4 + 64


def reply_cap(n_calls: int, max_output: int) -> int:
    """The largest reply (in bytes) the scorer reads: ``n_calls`` triples of capped strings."""
    return n_calls * (max_output * 4 + 4 * DETAIL_CAP + 64) + 1024


def detail_of(exc: BaseException) -> str:
    """The detail text of an exception, as the child reports it (the scorer writes the same)."""
    name = type(exc).__name__
    try:
        return f"{name}: {exc}"[:CHILD_DETAIL_CAP]
    except BaseException:  # a hostile __str__
        return name


# Children of a worker run as UID_BASE + the worker's host pid (pid_max is at most 2**22), a range
# no account uses: a shared uid such as nobody's would pool RLIMIT_NPROC across every sandbox.
UID_BASE = 2_000_000_000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME = 1, 2, 4, 8, 32, 1024
MS_REC, MS_PRIVATE, MNT_DETACH = 0x4000, 1 << 18, 2
PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 4, 22, 38, 2

# ------------------------------------------------------------------ the seccomp filter (assembled here)

# The system-call numbers the filters name, per architecture (x86-64 and aarch64, whose numbers are
# the kernel's generic table): tests/test_sandbox_zygote.py checks both against the kernel's
# <asm/unistd_64.h> and <asm-generic/unistd.h>. aarch64 has no open/stat/fork/... (only the *at
# calls), so a name missing from its table is simply not there to allow.
SYSCALLS = {
    "x86_64": {
        "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
        "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
        "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21,
        "pipe": 22, "select": 23, "sched_yield": 24, "mremap": 25, "msync": 26, "mincore": 27, "madvise": 28,
        "dup": 32, "dup2": 33, "nanosleep": 35, "getitimer": 36, "alarm": 37, "setitimer": 38, "getpid": 39,
        "sendfile": 40, "socket": 41, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "exit": 60, "wait4": 61,
        "kill": 62, "uname": 63, "fcntl": 72, "flock": 73, "fsync": 74, "fdatasync": 75, "truncate": 76,
        "ftruncate": 77, "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "rename": 82, "mkdir": 83,
        "rmdir": 84, "creat": 85, "link": 86, "unlink": 87, "symlink": 88, "readlink": 89, "chmod": 90, "fchmod": 91,
        "chown": 92, "fchown": 93, "lchown": 94, "umask": 95, "gettimeofday": 96, "getrlimit": 97, "getrusage": 98,
        "sysinfo": 99, "times": 100, "ptrace": 101, "getuid": 102, "getgid": 104, "setuid": 105, "setgid": 106,
        "geteuid": 107, "getegid": 108, "setpgid": 109, "getppid": 110, "getpgrp": 111, "setsid": 112,
        "getgroups": 115, "setgroups": 116, "setresuid": 117, "getresuid": 118, "setresgid": 119, "getresgid": 120,
        "getpgid": 121, "getsid": 124, "capget": 125, "capset": 126, "rt_sigpending": 127, "rt_sigtimedwait": 128,
        "rt_sigqueueinfo": 129, "rt_sigsuspend": 130, "sigaltstack": 131, "utime": 132, "statfs": 137,
        "fstatfs": 138, "getpriority": 140, "sched_getparam": 143, "sched_getscheduler": 145, "prctl": 157,
        "arch_prctl": 158, "setrlimit": 160, "chroot": 161, "mount": 165, "umount2": 166, "gettid": 186,
        "getxattr": 191, "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
        "tkill": 200, "time": 201, "futex": 202, "sched_getaffinity": 204, "epoll_create": 213, "getdents64": 217,
        "set_tid_address": 218, "restart_syscall": 219, "fadvise64": 221, "clock_gettime": 228, "clock_getres": 229,
        "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232, "epoll_ctl": 233, "tgkill": 234, "utimes": 235,
        "waitid": 247, "openat": 257, "mkdirat": 258, "fchownat": 260, "futimesat": 261, "newfstatat": 262,
        "unlinkat": 263, "renameat": 264, "linkat": 265, "symlinkat": 266, "readlinkat": 267, "fchmodat": 268,
        "faccessat": 269, "pselect6": 270, "ppoll": 271, "unshare": 272, "set_robust_list": 273,
        "get_robust_list": 274, "utimensat": 280, "epoll_pwait": 281, "eventfd2": 290, "epoll_create1": 291,
        "dup3": 292, "pipe2": 293, "preadv": 295, "pwritev": 296, "rt_tgsigqueueinfo": 297, "prlimit64": 302,
        "setns": 308, "getcpu": 309, "renameat2": 316, "getrandom": 318, "membarrier": 324, "copy_file_range": 326,
        "preadv2": 327, "pwritev2": 328, "statx": 332, "rseq": 334, "pidfd_send_signal": 424, "pidfd_open": 434,
        "clone3": 435, "close_range": 436, "faccessat2": 439, "epoll_pwait2": 441,
    },
    "aarch64": {
        "getxattr": 8, "lgetxattr": 9, "fgetxattr": 10, "listxattr": 11, "llistxattr": 12, "flistxattr": 13,
        "getcwd": 17, "eventfd2": 19, "epoll_create1": 20, "epoll_ctl": 21, "epoll_pwait": 22, "dup": 23, "dup3": 24,
        "fcntl": 25, "ioctl": 29, "flock": 32, "mkdirat": 34, "unlinkat": 35, "symlinkat": 36, "linkat": 37,
        "renameat": 38, "umount2": 39, "mount": 40, "statfs": 43, "fstatfs": 44, "truncate": 45, "ftruncate": 46,
        "faccessat": 48, "chdir": 49, "fchdir": 50, "chroot": 51, "fchmod": 52, "fchmodat": 53, "fchownat": 54,
        "fchown": 55, "openat": 56, "close": 57, "pipe2": 59, "getdents64": 61, "lseek": 62, "read": 63, "write": 64,
        "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68, "preadv": 69, "pwritev": 70, "sendfile": 71,
        "pselect6": 72, "ppoll": 73, "readlinkat": 78, "newfstatat": 79, "fstat": 80, "fsync": 82, "fdatasync": 83,
        "utimensat": 88, "capget": 90, "capset": 91, "exit": 93, "exit_group": 94, "waitid": 95,
        "set_tid_address": 96, "unshare": 97, "futex": 98, "set_robust_list": 99, "get_robust_list": 100,
        "nanosleep": 101, "getitimer": 102, "setitimer": 103, "clock_gettime": 113, "clock_getres": 114,
        "clock_nanosleep": 115, "ptrace": 117, "sched_getscheduler": 120, "sched_getparam": 121,
        "sched_getaffinity": 123, "sched_yield": 124, "restart_syscall": 128, "kill": 129, "tkill": 130,
        "tgkill": 131, "sigaltstack": 132, "rt_sigsuspend": 133, "rt_sigaction": 134, "rt_sigprocmask": 135,
        "rt_sigpending": 136, "rt_sigtimedwait": 137, "rt_sigqueueinfo": 138, "rt_sigreturn": 139,
        "getpriority": 141, "setgid": 144, "setuid": 146, "setresuid": 147, "getresuid": 148, "setresgid": 149,
        "getresgid": 150, "times": 153, "setpgid": 154, "getpgid": 155, "getsid": 156, "setsid": 157,
        "getgroups": 158, "setgroups": 159, "uname": 160, "getrlimit": 163, "setrlimit": 164, "getrusage": 165,
        "umask": 166, "prctl": 167, "getcpu": 168, "gettimeofday": 169, "getpid": 172, "getppid": 173, "getuid": 174,
        "geteuid": 175, "getgid": 176, "getegid": 177, "gettid": 178, "sysinfo": 179, "socket": 198, "brk": 214,
        "munmap": 215, "mremap": 216, "clone": 220, "execve": 221, "mmap": 222, "fadvise64": 223, "mprotect": 226,
        "msync": 227, "mincore": 232, "madvise": 233, "rt_tgsigqueueinfo": 240, "wait4": 260, "prlimit64": 261,
        "setns": 268, "renameat2": 276, "getrandom": 278, "membarrier": 283, "copy_file_range": 285, "preadv2": 286,
        "pwritev2": 287, "statx": 291, "rseq": 293, "pidfd_send_signal": 424, "pidfd_open": 434, "clone3": 435,
        "close_range": 436, "faccessat2": 439, "epoll_pwait2": 441,
    },
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
AUDIT_ARCH_X86_64 = AUDIT_ARCH["x86_64"]
# The allowlist: what the worker, its zygote and a child running CPython need (files, memory,
# time, signals' own handling, threads, waiting, the uid drop). Everything else is refused with
# EPERM: execve, sockets, SysV IPC and POSIX queues, ptrace, process_vm_*, kcmp, pidfd_getfd, bpf,
# perf, userfaultfd, io_uring, keys, modules, kexec, reboot, swap, chroot, pivot_root, the new mount
# API, rt_sigqueueinfo/rt_tgsigqueueinfo/pidfd_send_signal/pidfd_open, and any call added to a
# kernel later. Checked by arguments: ``clone`` (no namespace flag), ``unshare``/``setns`` (only
# CLONE_NEWPID: the zygote's fresh PID namespace per request; a child has no capability for it),
# ``clone3`` gets ENOSYS (its flags sit in memory a filter cannot read; the C library falls back to
# ``clone``). ``mount``/``umount2`` are left to the worker (its work area; children hold no
# capability), and ``kill``/``tkill``/``tgkill`` to the worker and zygote: every child installs the
# CHILD filter on top (see child_seccomp_program).
ALLOWED_SYSCALLS = (
    "read", "write", "open", "openat", "close", "stat", "fstat", "lstat", "newfstatat", "statx", "poll", "ppoll",
    "lseek", "mmap", "mprotect", "munmap", "brk", "mremap", "msync", "mincore", "madvise", "rt_sigaction",
    "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend", "sigaltstack", "ioctl",
    "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", "access", "faccessat",
    "faccessat2", "pipe", "pipe2", "select", "pselect6", "sched_yield", "dup", "dup2", "dup3", "nanosleep",
    "clock_nanosleep", "getitimer", "setitimer", "alarm", "getpid", "getppid", "gettid", "fork", "vfork", "wait4",
    "waitid", "kill", "tkill", "tgkill", "uname", "fcntl", "flock", "fsync", "fdatasync", "truncate", "ftruncate",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
    "rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat",
    "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "umask", "gettimeofday", "time",
    "getrlimit", "setrlimit", "prlimit64", "getrusage", "sysinfo", "times", "getuid", "getgid", "geteuid", "getegid",
    "getresuid", "getresgid", "getgroups", "setuid", "setgid", "setresuid", "setresgid", "setgroups", "setsid",
    "setpgid", "getpgid", "getpgrp", "getsid", "capget", "capset", "statfs", "fstatfs", "getpriority",
    "sched_getaffinity", "sched_getparam", "sched_getscheduler", "prctl", "arch_prctl", "futex", "set_tid_address",
    "set_robust_list", "get_robust_list", "clock_gettime", "clock_getres", "exit", "exit_group", "utime", "utimes",
    "utimensat", "futimesat", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
    "epoll_pwait2", "eventfd2", "getrandom", "rseq", "restart_syscall", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "fadvise64", "close_range", "getcpu", "membarrier", "sendfile",
    "copy_file_range",
)
WORKER_ONLY = ("mount", "umount2")  # the worker's work area; allowed where ``allow_mount``
# Refused to a child on top of the shared filter: every signal but to itself (its own pid, or 0: its
# own process group), namespaces and mounts.
CHILD_DENIED = ("rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal", "pidfd_open", "unshare", "setns",
                "mount", "umount2")
CHILD_SIGNALS = ("kill", "tkill", "tgkill")  # the target (pid, tid or tgid) is the first argument
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
CLONE_NEWUSER, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP = 0x10000000, 0x08000000, 0x04000000, 0x02000000
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
    CLONE_NEWCGROUP
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_JSET_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_BPF_JA = 0x05  # jump always, by k (32 bits: the only long jump)
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38


class _Bpf:
    """A classic-BPF program with named labels (jumps are resolved, and range-checked, at the end)."""

    def __init__(self) -> None:
        self.prog: list[list] = []  # [code, jt, jf, k], jt/jf as label names or 0
        self.labels: dict[str, int] = {}

    def op(self, code: int, jt: object = 0, jf: object = 0, k: int = 0) -> None:
        self.prog.append([code, jt, jf, k])

    def label(self, name: str) -> None:
        self.labels[name] = len(self.prog)

    def far(self, code: int, k: int, label: str) -> None:
        """If the test holds, go to ``label`` however far (a conditional jump reaches 255 ahead)."""
        self.op(code, 0, 1, k)
        self.op(_BPF_JA, k=label)  # type: ignore[arg-type]  # resolved in assemble()

    def far_unless(self, code: int, k: int, label: str) -> None:
        self.op(code, 1, 0, k)
        self.op(_BPF_JA, k=label)  # type: ignore[arg-type]

    def head(self, machine: str) -> None:
        self.op(_BPF_LD_W_ABS, k=4)  # seccomp_data.arch: another ABI's numbers mean other calls: killed
        self.far_unless(_BPF_JEQ_K, AUDIT_ARCH[machine], "kill")
        self.op(_BPF_LD_W_ABS, k=0)  # seccomp_data.nr
        if machine == "x86_64":
            self.far(_BPF_JGE_K, 0x40000000, "kill")  # the x32 ABI

    def returns(self) -> None:
        for name, value in (("allow", _RET_ALLOW), ("eperm", _RET_ERRNO | _EPERM),
                            ("enosys", _RET_ERRNO | _ENOSYS), ("kill", _RET_KILL_PROCESS)):
            self.label(name)
            self.op(_BPF_RET_K, k=value)

    def assemble(self) -> bytes:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.prog):
            if isinstance(k, str):
                k = self.labels[k] - i - 1
            jt = self.labels[jt] - i - 1 if isinstance(jt, str) else jt
            jf = self.labels[jf] - i - 1 if isinstance(jf, str) else jf
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError("seccomp jump out of range")
            out.append(struct.pack("=HBBI", code, jt, jf, k))
        return b"".join(out)


def seccomp_program(machine: str, allow_mount: bool = False) -> bytes | None:
    """The shared filter as ``struct sock_filter`` records, or None for an architecture without a
    table (the level then says so). An ALLOWLIST: ``ALLOWED_SYSCALLS`` (plus ``WORKER_ONLY`` where
    ``allow_mount``) pass, ``clone``/``unshare``/``setns`` by their flags, ``clone3`` is ENOSYS,
    anything else EPERM; a call of another ABI kills. The worker installs it on itself once, after
    its own setup, so the zygote and every child inherit it."""
    table = SYSCALLS.get(machine)
    if table is None:
        return None
    b = _Bpf()
    b.head(machine)
    b.far(_BPF_JEQ_K, table["clone3"], "enosys")
    b.far(_BPF_JEQ_K, table["clone"], "clone")
    b.far(_BPF_JEQ_K, table["unshare"], "newpid0")
    b.far(_BPF_JEQ_K, table["setns"], "newpid1")
    names = ALLOWED_SYSCALLS + (WORKER_ONLY if allow_mount else ())
    numbers = sorted({table[n] for n in names if n in table})
    for chunk in range(0, len(numbers), 64):  # each chunk with its own "allow" within reach
        for nr in numbers[chunk:chunk + 64]:
            b.op(_BPF_JEQ_K, f"allow{chunk}", 0, nr)
        b.op(_BPF_JA, k=f"next{chunk}")  # type: ignore[arg-type]
        b.label(f"allow{chunk}")
        b.op(_BPF_RET_K, k=_RET_ALLOW)
        b.label(f"next{chunk}")
    b.op(_BPF_RET_K, k=_RET_ERRNO | _EPERM)
    b.label("clone")
    b.op(_BPF_LD_W_ABS, k=16)  # args[0], low half: clone's flags
    b.op(_BPF_JSET_K, "eperm", "allow", NAMESPACE_FLAGS)
    b.label("newpid0")
    b.op(_BPF_LD_W_ABS, k=16)  # unshare(flags)
    b.op(_BPF_JEQ_K, "allow", "eperm", CLONE_NEWPID)
    b.label("newpid1")
    b.op(_BPF_LD_W_ABS, k=24)  # setns(fd, nstype)
    b.op(_BPF_JEQ_K, "allow", "eperm", CLONE_NEWPID)
    b.returns()
    return b.assemble()


def child_seccomp_program(machine: str, self_pid: int) -> bytes | None:
    """The filter a child adds on top of the shared one (both apply, the stricter wins): signals
    only to itself (``kill``/``tkill``/``tgkill`` whose target is ``self_pid`` (1 in its own PID
    namespace) or 0, its own process group), no ``CHILD_DENIED`` call at all."""
    table = SYSCALLS.get(machine)
    if table is None:
        return None
    b = _Bpf()
    b.head(machine)
    for name in CHILD_SIGNALS:
        b.op(_BPF_JEQ_K, "signal", 0, table[name])
    for name in CHILD_DENIED:
        b.op(_BPF_JEQ_K, "eperm", 0, table[name])
    b.op(_BPF_RET_K, k=_RET_ALLOW)
    b.label("signal")
    b.op(_BPF_LD_W_ABS, k=16)  # args[0], low half (the kernel reads a pid_t)
    b.op(_BPF_JEQ_K, "allow", 0, 0)
    b.op(_BPF_JEQ_K, "allow", "eperm", self_pid)
    b.returns()
    return b.assemble()


_ARITY = re.compile(r"positional argument|required (keyword-only )?argument|unexpected keyword argument|"
                    r"takes no arguments")


# ------------------------------------------------------------------ the child side (hostile code runs here)


def _classify(exc: BaseException) -> tuple[str, str]:
    text = detail_of(exc)
    if isinstance(exc, MemoryError):
        return "memory", text
    if type(exc) is NameError:
        return "missing_name", text
    if isinstance(exc, TypeError) and _ARITY.search(text):
        return "arity", text
    return "exception", text


def _run_calls(fd: int | None, units: list, start: int, max_output: int) -> None:  # noqa: C901
    """Run calls from flat position ``start`` on, sending one frame per call (and one per loaded unit)."""
    position = 0
    for unit_index, (code, calls, _fail_fast) in enumerate(units):
        if position + len(calls) <= start:
            position += len(calls)
            continue
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        try:
            # The scorer compiles (where the compiler's memory is already paged in) and the child
            # unmarshals before its model code runs (_child_main): one code object, or its top-level
            # blocks to run in order. Source text only when compiling there hit a limit; bytes only
            # when they would not unmarshal (this child then fails as it would have).
            kind = type(code)
            compiled = (compile(code, "<answer>", "exec") if kind is str
                        else _loads(code) if kind is bytes else code)
            if type(compiled) is list:  # [prelude, source text]: the scorer compiled only its prelude
                compiled = tuple(compile(b, "<answer>", "exec") if type(b) is str
                                 else _loads(b) if type(b) is bytes else b for b in compiled)
        except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
            status, detail = _classify(exc)
            if isinstance(exc, (SyntaxError, ValueError)):
                status = "syntax"
            for _ in range(max(start - position, 0), len(calls)):
                _send(fd, status, detail)
            position += len(calls)
            continue
        try:
            if type(compiled) is tuple:
                for block in compiled:
                    exec(block, namespace)
            else:
                exec(compiled, namespace)
        except BaseException as exc:
            status, detail = _classify(exc)
            for _ in range(max(start - position, 0), len(calls)):
                _send(fd, status, "while defining: " + detail)
            position += len(calls)
            continue
        _send(fd, "loaded", str(unit_index))
        for i, (entry, args) in enumerate(calls):
            if position + i < start:
                continue
            fn = namespace.get(entry)
            if fn is None:
                _send(fd, "missing_name", f"{entry} is not defined")
                continue
            try:
                value = fn(*args)
            except BaseException as exc:
                _send(fd, *_classify(exc))
                continue
            if not isinstance(value, str):
                _send(fd, "not_a_string", f"returned {type(value).__name__}")
                continue
            # str methods through the base class: a subclass may lie in __len__ or encode().
            if str.__len__(value) > max_output:
                _send(fd, "output_too_large", f"{str.__len__(value)} characters > {max_output}")
                continue
            _send(fd, "ok", str.__str__(value))
        position += len(calls)


class _Jail:
    """What the zygote and a child apply to themselves, prepared by the worker (ctypes is loaded
    there, once): the shared seccomp filter (installed on the worker: everything forked from it
    inherits it), the child's own filter on top, the capability drop, and the zygote's fresh PID
    namespace per request (``setns`` back to its own, then ``unshare(CLONE_NEWPID)``)."""

    drop_caps = False
    prctl: Any = None  # libc functions (ctypes), set by _prepare_jail
    capset: Any = None
    setns: Any = None
    unshare: Any = None
    buffer: Any = None  # a ctypes array type the size of the child's filter
    fprog: Any = None  # the ``struct sock_fprog`` class
    addressof: Any = None
    machine = ""
    filter_addr = 0
    _keep: tuple = ()

    def apply(self) -> bool:
        if self.drop_caps:
            # In a user namespace of its own the child is that namespace's root: drop every
            # capability (effective, permitted, inheritable; no exec can regain them).
            if self.capset(self._keep[0], self._keep[1]) != 0:
                return False
        return True

    def install(self) -> bool:
        if self.prctl is None:
            return False
        return (self.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                and self.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.filter_addr, 0, 0) == 0)

    def install_child(self, self_pid: int) -> bool:
        """The child's filter (signals only to itself, no namespace or mount call), on top."""
        if self.prctl is None:
            return True  # no seccomp in force: the level says so
        program = child_seccomp_program(self.machine, self_pid)
        if program is None:
            return False
        buffer = self.buffer.from_buffer_copy(program)
        fprog = self.fprog(len(program) // 8, self.addressof(buffer))
        return self.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.addressof(fprog), 0, 0) == 0

    def fresh_pid_namespace(self, own_fd: int) -> bool:
        """Make the next fork the init of a new PID namespace (the zygote, once per request)."""
        if self.setns is None or own_fd < 0:
            return False
        return self.setns(own_fd, CLONE_NEWPID) == 0 and self.unshare(CLONE_NEWPID) == 0


_JAIL = _Jail()

# ------------------------------------------------------------------ the clean zygote
#
# The worker reads requests; its memory holds every earlier response's code, inputs and results.
# So children are not forked from it: before the first request the worker forks a ZYGOTE, which
# never receives a request's bytes. Per request the worker writes one byte on the zygote's control
# pipe; the zygote forks a child (into a fresh PID namespace where it can) and reports its pid, then
# its wait status and CPU time (ZYGOTE_MESSAGE). The child itself reads its request from the request
# pipe (worker -> child) and writes its frames on the result pipe (child -> worker); both pipes
# outlive children, so the worker empties them after each child (every writer and reader of the
# request is dead by then).
ZYGOTE_MESSAGE = struct.Struct(">cqq")  # b"R" ready (fresh pidns, imports locked), b"P"/b"p" pid (in a fresh
# PID namespace or not), b"S" wait status + CPU milliseconds
END_CODE = 255  # a frame the harness sends after its last call: "nothing more comes" (then it waits)

# The modules model code may import (ALL others fail, whatever the route: ``import``, ``__import__``,
# ``sys.modules``, the import machinery, the classes ``object.__subclasses__()`` lists): the preloaded
# pure modules and the harmless ones every worker has loaded anyway, which answers did import
# before (``from __future__ import annotations``, ``sys.setrecursionlimit``, ``time``...). Not:
# ctypes, _ctypes, gc, marshal, os, posix, signal, resource, select, platform, importlib, _imp...
ALLOWED_IMPORTS = PRELOAD + ("__future__", "abc", "builtins", "codecs", "copyreg", "enum", "io",
                             "keyword", "reprlib", "struct", "sys", "time", "types")
# Classes left visible to ``type.__subclasses__`` (walked from ``object``): those of the allowed
# modules and of the interpreter's own harmless internals. The classes of every other module (ctypes,
# _ctypes, os, posix, signal, the import machinery, this worker...) are taken out of their bases'
# subclass registries, so no walk finds them or the functions (and ``__globals__``) they hold.
VISIBLE_CLASS_MODULES = frozenset(ALLOWED_IMPORTS + (
    "_abc", "abc", "_collections", "_collections_abc", "_contextvars", "_functools", "_io", "io", "_operator",
    "_sre", "_thread", "_weakref", "_weakrefset", "weakref", "Token", "codecs", "_codecs", "encodings",
    "encodings.utf_8", "enum", "re._parser", "re._compiler", "re._constants", "re._casefix", "reprlib",
    "keyword", "copyreg", "types", "pickle", "_struct", "_string"))


# The harness's own globals (set on its dict, see _harness); defined here for readers and type checkers.
_PID = 0
_OUT: Any = None
_IDLE: Any = None
_MODULES: dict = {}


class _ChildStart(BaseException):
    """Raised in a child right after the zygote's fork: the stack unwinds to the module's top, so
    no frame of the zygote's (or the worker's set-up, with its ctypes objects) stays reachable."""


def _subclass_registry(ctypes: Any, cls: type, offset: int) -> dict | None:
    pointer = ctypes.c_void_p.from_address(id(cls) + offset).value
    if not pointer:
        return None
    registry = ctypes.cast(pointer, ctypes.py_object).value
    return registry if type(registry) is dict else None


# ``PyTypeObject.tp_subclasses`` (CPython 3.10/3.11): a dict {id(subclass): weakref}.
_TP_SUBCLASSES = 45 * 8


def _hide_classes(ctypes: Any) -> bool:
    """Take every class of a module outside VISIBLE_CLASS_MODULES out of its bases' subclass
    registries. Checked on ``object`` first (the registry found must be exactly what
    ``object.__subclasses__()`` lists); False where it cannot be done (another CPython)."""
    if sys.version_info[:2] not in ((3, 10), (3, 11)) or struct.calcsize("P") != 8:
        return False
    try:
        root = _subclass_registry(ctypes, object, _TP_SUBCLASSES)
        if root is None or {id(r()) for r in root.values()} != {id(c) for c in object.__subclasses__()}:
            return False
        seen: dict[int, type] = {}
        todo: list[type] = [object]
        while todo:
            cls = todo.pop()
            for sub in type.__subclasses__(cls):  # type: ignore[var-annotated]
                if id(sub) not in seen:
                    seen[id(sub)] = sub
                    todo.append(sub)
        for found in seen.values():
            if getattr(found, "__module__", None) in VISIBLE_CLASS_MODULES:
                continue
            for base in found.__bases__:
                registry = _subclass_registry(ctypes, base, _TP_SUBCLASSES)
                if registry is not None:
                    registry.pop(id(found), None)
        return all(getattr(c, "__module__", None) in VISIBLE_CLASS_MODULES for c in object.__subclasses__())
    except Exception:
        return False


def _typing_stand_in() -> Any:
    """The module ``import typing`` gets in the sandbox: annotations only. The real ``typing`` imports
    ``contextlib``, which holds ``os``; answers that annotate (``from typing import List, Optional``)
    must still run, so this stand-in maps the common names onto builtins, ``collections`` and
    ``collections.abc`` (subscriptable since 3.9) and the rest onto one inert form that takes any
    subscript, call or ``|``. Its functions run with a globals dict of their own (builtins only): nothing of
    this worker is reachable through them."""
    import collections
    import collections.abc as abc

    space: dict = {"__builtins__": builtins}  # reachable from model code anyway

    def fresh(fn: Any) -> Any:
        return type(fn)(fn.__code__, space, fn.__name__, fn.__defaults__)

    def _init(self: Any, name: Any = "form", *args: Any, **kwargs: Any) -> None:
        self.name = name

    def _same(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    def _repr(self: Any) -> str:
        return "typing." + str(self.name)

    def _cast(tp: Any, value: Any) -> Any:
        return value

    def _new_type(name: Any, tp: Any) -> Any:
        return tp

    def _identity(fn: Any) -> Any:
        return fn

    form = type("_Form", (), {"__module__": "typing", "__slots__": ("name",), "__init__": fresh(_init),
                              "__getitem__": fresh(_same), "__call__": fresh(_same), "__or__": fresh(_same),
                              "__ror__": fresh(_same), "__repr__": fresh(_repr)})
    module = type(sys)("typing")
    names: dict[str, Any] = {
        "List": list, "Dict": dict, "Set": set, "FrozenSet": frozenset, "Tuple": tuple, "Type": type,
        "Text": str, "DefaultDict": collections.defaultdict, "Deque": collections.deque,
        "Counter": collections.Counter, "OrderedDict": collections.OrderedDict, "ChainMap": collections.ChainMap,
        "Pattern": re.Pattern, "Match": re.Match, "TYPE_CHECKING": False, "TypeVar": form,
        "cast": fresh(_cast), "NewType": fresh(_new_type), "overload": fresh(_identity),
        "no_type_check": fresh(_identity), "final": fresh(_identity),
    }
    names["AbstractSet"] = abc.Set
    for name in ("Iterable", "Iterator", "Sequence", "MutableSequence", "Mapping", "MutableMapping", "MutableSet",
                 "Collection", "Container", "Callable", "Generator", "Hashable",
                 "Sized", "Reversible", "KeysView", "ValuesView", "ItemsView"):
        names[name] = getattr(abc, name)
    for name in ("Any", "Union", "Optional", "Literal", "Final", "ClassVar", "NoReturn", "Never", "Annotated",
                 "TypeAlias", "AnyStr", "SupportsInt", "SupportsFloat", "SupportsIndex"):
        names[name] = form(name)
    vars(module).update(names)
    return module


def _guarded_import(name: str, globals: object = None, locals: object = None, fromlist: object = (),
                    level: int = 0) -> object:
    # Runs with a globals dict of its own (_lock_imports): _MODULES, the allowed modules only.
    module = _MODULES.get(name) if level == 0 and type(name) is str else None
    if module is None:
        raise ImportError(f"import of {name!r} is not allowed in the sandbox", name=name)
    if not fromlist and "." in name:
        return _MODULES[name.partition(".")[0]]
    return module


def _lock_imports() -> int:
    """The zygote, once, before any child: only ALLOWED_IMPORTS can be imported from here on.

    ``builtins.__import__`` serves those modules from a dict of its own and refuses every other
    name; ``sys.modules`` holds only them; the import machinery has no finder, no hook and no
    ``_imp`` left to load a built-in, frozen or extension module with (the extension cache would
    hand back ``_ctypes`` without its file); the modules' loaders and specs (a way to the machinery's
    globals) are dropped; ctypes' namespace is emptied (the zygote keeps only the few functions it
    calls, and each child drops those too); the classes of every other module are hidden from
    ``__subclasses__``. Each child then empties this worker module's globals before model code runs.
    Returns 1 where the import routes are closed, plus 2 where the classes are hidden too (CPython
    3.10/3.11 only: later versions keep built-in types' registries elsewhere)."""
    import ctypes

    modules = {name: sys.modules[name] for name in ALLOWED_IMPORTS if name in sys.modules}
    modules["typing"] = _typing_stand_in()
    hidden = _hide_classes(ctypes)
    for module in list(sys.modules.values()) + [builtins, sys]:
        for attr in ("__loader__", "__spec__"):
            try:
                setattr(module, attr, None)
            except Exception:
                pass
    sys.meta_path.clear()
    sys.path_hooks.clear()
    sys.path_importer_cache.clear()
    sys.path.clear()
    imp = sys.modules.get("_imp")
    if imp is not None:
        for attr in [a for a in vars(imp) if not a.startswith("__")]:
            setattr(imp, attr, None)
    for name in ("_frozen_importlib", "_frozen_importlib_external"):
        machinery = sys.modules.get(name)
        if machinery is not None:
            space = vars(machinery)
            for attr in ("_os", "_imp", "marshal", "_io", "sys", "_thread", "_warnings", "_weakref", "winreg",
                         "posix", "_bootstrap", "_bootstrap_external", "_pathseps_with_colon"):
                if attr in space:
                    space[attr] = None
    guard_globals = {"__builtins__": builtins, "_MODULES": modules, "ImportError": ImportError, "type": type,
                     "str": str}
    make: Any = type(_guarded_import)  # types.FunctionType
    guard = make(_guarded_import.__code__, guard_globals, "__import__",
                                  _guarded_import.__defaults__)
    builtins.__import__ = guard
    for name in [n for n in sys.modules if n.startswith("ctypes")]:
        vars(sys.modules[name]).clear()
    sys.modules.clear()
    sys.modules.update(modules)
    return int(builtins.__import__ is guard and not sys.modules.keys() - modules.keys()) | (2 if hidden else 0)


def _harness_send(fd: object, status: str, payload: str) -> None:
    # Harness globals (_harness): the result pipe as a file object (no module function: a module
    # function's __self__ would be the module), this child's pid in its own namespace.
    data = str.encode(payload, "utf-8", "surrogatepass")
    view = memoryview(FRAME_HEADER.pack(_CODE[status], _PID, len(data)) + data)
    while view:
        view = view[_OUT.write(view):]


_send = _harness_send  # what _run_calls calls (on the harness's dict: see _harness)


def _harness_main(units: list, start: int, max_output: int) -> None:
    _run_calls(None, units, start, max_output)
    _OUT.write(FRAME_HEADER.pack(END_CODE, _PID, 0))
    while True:  # the worker has every result and kills this child; until then it waits
        _IDLE.read(1)


def _bad_marshal(code: object) -> object:
    raise ValueError("bad marshal data")


def _harness(res_fd: int, req_fd: int) -> dict:
    """The globals model code's harness runs with: no module but builtins, no worker function
    (``_run_calls`` and its helpers are rebuilt on this dict), the builtins the harness uses bound
    here (a program may replace ``builtins.len``), the pipes as file objects."""
    import io

    h: dict = {"__builtins__": builtins, "builtins": builtins, "_CODE": dict(_CODE), "FRAME_HEADER": FRAME_HEADER,
               "END_CODE": END_CODE, "_ARITY": _ARITY, "CHILD_DETAIL_CAP": CHILD_DETAIL_CAP, "_PID": 0,
               "_OUT": io.FileIO(res_fd, "wb", closefd=False), "_IDLE": io.FileIO(req_fd, "rb", closefd=False),
               "len": len, "isinstance": isinstance, "type": type, "enumerate": enumerate, "range": range,
               "max": max, "str": str, "bytes": bytes, "memoryview": memoryview, "compile": compile, "exec": exec,
               "tuple": tuple}
    make: Any = type(_harness)  # types.FunctionType
    for name, fn in (("_send", _harness_send), ("_classify", _classify), ("detail_of", detail_of),
                     ("_run_calls", _run_calls), ("_loads", _bad_marshal), ("main", _harness_main)):
        h[name] = make(fn.__code__, h, name, fn.__defaults__)
    return h


def _zygote(ctl: int, status: int, req: int, res: int, pidns_fd: int, settings: tuple, lock: bool) -> None:
    """The zygote's loop (never returns; in a child it raises _ChildStart)."""
    harness = _harness(res, req)
    locked = _lock_imports() if lock else 0
    fresh = _JAIL.fresh_pid_namespace(pidns_fd)
    if fresh:
        pid = os.fork()  # the probe: the init of a namespace of its own, gone at once
        if pid == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        _, code = os.waitpid(pid, 0)
        fresh = code == 0
    write_all(status, ZYGOTE_MESSAGE.pack(b"R", int(fresh), int(locked)))
    while True:
        if not os.read(ctl, 1):
            os._exit(0)
        in_fresh = fresh and _JAIL.fresh_pid_namespace(pidns_fd)
        pid = os.fork()
        if pid == 0:
            raise _ChildStart((req, res, settings, in_fresh, lock, harness))
        write_all(status, ZYGOTE_MESSAGE.pack(b"P" if in_fresh else b"p", pid, 0))
        # CPU time from os.times(): os.wait4 would import ``resource`` (refused from here on).
        before = os.times()
        _, wait_status = os.waitpid(pid, 0)
        after = os.times()
        cpu = after.children_user + after.children_system - before.children_user - before.children_system
        write_all(status, ZYGOTE_MESSAGE.pack(b"S", wait_status, int(cpu * 1000)))


def _reaches_a_module(value: object) -> bool:
    """A module, a function bound to one (its ``__self__``), or the jail's ctypes functions."""
    return (type(value) is type(sys) or type(getattr(value, "__self__", None)) is type(sys)
            or isinstance(value, _Jail))


def _child_main(start_args: tuple) -> None:
    """The child: forked by the zygote, its stack unwound to the module's top. Trusted until the
    last line: read the request, enter the jail, then run model code with nothing of the worker
    left reachable (this module's globals emptied when the imports are locked)."""
    req, res, settings, fresh, lock, harness = start_args
    rlimits, uid, max_output = settings
    try:
        os.setsid()
        head = _read_exact(req, MESSAGE_HEADER.size)
        body = _read_exact(req, MESSAGE_HEADER.unpack(head)[0]) if head else None
        if body is None:
            os._exit(112)
        start, workdir, cpu_s, units = marshal.loads(body)
        low, high = min(req, res), max(req, res)
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)
        os.chdir(workdir)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        for limit, value in rlimits:  # address space, open files, processes
            resource.setrlimit(limit, value)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        me = 1 if fresh else os.getpid()
        if (_JAIL.drop_caps and not _JAIL.apply()) or not _JAIL.install_child(me):
            os._exit(111)  # never run model code outside the jail the worker reported
        sys.setrecursionlimit(CHILD_RECURSION_LIMIT)
        units = [(_unmarshalled(code), calls, fail_fast) for code, calls, fail_fast in units]
        harness["_PID"] = me
        run = harness["main"]
    except BaseException:
        os._exit(113)
    del head, body, low, high, workdir, cpu_s, rlimits, settings, start_args, harness
    if lock:
        # Out of reach from here on: every module this file holds (os, marshal, signal...), the
        # module functions bound here (marshal.loads) and ctypes' functions (_JAIL). What is left
        # (this file's functions, constants) calls nothing without them. Popping the names, not
        # clearing the dict: freeing this module's functions would write to (copy) their pages.
        space = globals()
        for name in [n for n, v in space.items() if _reaches_a_module(v)]:
            del space[name]
        del space
    run(units, start, max_output)


# ------------------------------------------------------------------ the worker side (trusted)


def _xattrs(path: str) -> list:
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError:  # no extended attributes on this file system
        return []


class _Mounts:
    """mount(2)/umount2(2) for the work area (through ctypes, loaded by the worker)."""

    def __init__(self, libc: Any) -> None:
        self.mount, self.umount2 = libc.mount, libc.umount2

    def fresh(self, target: bytes, options: bytes) -> bool:
        flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME
        return self.mount(b"tmpfs", target, b"tmpfs", flags, options) == 0

    def drop(self, target: bytes) -> bool:
        return self.umount2(target, MNT_DETACH) == 0


class Worker:
    def __init__(self, limits: dict, root_dir: str, isolation: dict, mounts: _Mounts | None = None):
        self.limits = limits
        self.isolation = isolation
        self.uid = isolation["uid"] if isolation["uid_drop"] else None
        self.mounts = mounts if isolation.get("worktmpfs") else None
        self.workroot = "/work" if isolation["chroot"] else os.path.join(root_dir, "work")
        if self.mounts is None:
            os.makedirs(self.workroot, mode=0o711, exist_ok=True)
        self.work_options = (f"size={limits['work_bytes']},nr_inodes={limits['work_inodes']},mode=0711,"
                             "uid=0,gid=0").encode()
        self.serial = 0
        self.fresh = self.in_fresh = False  # a fresh PID namespace per child (the zygote's)
        self.child_pid: int | None = None  # the current child's, as the zygote reports it
        self.unsettled: str | None = None  # the work directory of a killed child not yet reported ended
        self.remounts = 0
        self.work_state: tuple = ()
        if self.mounts is not None:
            self._mount_work()
        # Limits that cannot hinder the worker are set on it once and inherited by every child.
        # RLIMIT_NPROC stays per child: it counts every process of the user, and without root the
        # worker's own forks would fail on a busy account.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize_bytes"],) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write raises OSError instead of killing
        self.rlimits = ((resource.RLIMIT_AS, (limits["as_bytes"],) * 2),
                        (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
                        (resource.RLIMIT_NPROC, (limits["nproc"],) * 2))

    def _frames(self, units: list, n_expected: int, timeout_s: float,  # noqa: C901
                out: list, loaded: set, budget_end: float, request: bytes) -> tuple[str, tuple | None]:
        """Read frames until ``n_expected`` results or the child ends; return why reading stopped
        and, where the child ended, the zygote's report of it (wait status, CPU ms).

        The request is written to the child as it reads it (never blocking: a child that stops
        reading cannot stall the worker). A unit's loading has ``timeout_s``, and so has each call
        from the previous result or load report on, but never past ``budget_end`` (the response's
        one budget). A load report counts once, for the unit whose call is due: repeated reports
        (the program holds the pipe) must not keep the wall clock from running out. The caps are
        applied here, on what the child wrote, whoever wrote it: a value over ``max_output``
        characters, a detail over ``DETAIL_CAP``; frames after the last expected one are never read;
        frames from any pid but the child's (as it sees itself) are dropped.
        """
        buf = b""
        max_output = self.limits["max_output"]
        limit = frame_cap(max_output)
        head = FRAME_HEADER.size
        rfd, zfd, wfd = self.res_r, self.status_r, self.req_w
        pending = memoryview(request)
        ended: tuple | None = None
        sender_pid = None
        deadline = min(time.monotonic() + timeout_s, budget_end)
        while len(out) < n_expected:
            if ended is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return ("budget" if deadline >= budget_end else "timeout"), None
                ready, writable, _ = select.select([rfd, zfd], [wfd] if pending else [], [], left)
                if not ready and not writable:
                    return ("budget" if deadline >= budget_end else "timeout"), None
                if writable:
                    try:
                        pending = pending[os.write(wfd, pending):]
                    except (BlockingIOError, BrokenPipeError):
                        pass
                if zfd in ready:
                    if self.child_pid is None:
                        self._child_report()
                    else:
                        ended = self._zygote_says(b"S")
                if rfd not in ready and ended is None:
                    continue
            try:
                chunk = os.read(rfd, 1 << 16)
            except BlockingIOError:  # nothing (more) to read
                if ended is not None:  # the child is gone and everything it wrote is read
                    return "eof", ended
                continue
            if not chunk:  # no writer left at all (the zygote is gone)
                return "eof", ended
            buf += chunk
            if sender_pid is None:
                if self.child_pid is None:
                    self._child_report()  # written by the zygote right after its fork
                sender_pid = 1 if self.in_fresh else self.child_pid
            while len(buf) >= head and len(out) < n_expected:
                code, sender, length = FRAME_HEADER.unpack_from(buf)
                if code == END_CODE and length == 0:
                    buf = buf[head:]
                    if sender == sender_pid:
                        return "eof", ended or (0, 0)  # it says nothing more comes: as if it exited 0
                    continue
                if code >= len(STATUSES) or length > limit:
                    out.append(("output_too_large" if code == 1 and length > limit else "killed", None,
                                "malformed result frame"))
                    return "bad", ended
                if len(buf) < head + length:
                    break
                payload, buf = buf[head:head + length], buf[head + length:]
                if sender != sender_pid:
                    continue
                status = STATUSES[code]
                if status == "loaded":
                    unit = str(self._unit_of(units, len(out))[0])
                    if unit not in loaded and payload == unit.encode():
                        loaded.add(unit)
                        deadline = min(time.monotonic() + timeout_s, budget_end)
                    continue
                try:
                    text = payload.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    out.append(("killed", None, "malformed result payload"))
                    return "bad", ended
                if status == "ok":
                    if len(text) > max_output:
                        out.append(("output_too_large", None, f"{len(text)} characters > {max_output}"))
                    else:
                        out.append(("ok", text, ""))
                else:
                    out.append((status, None, text[:DETAIL_CAP]))
                deadline = min(time.monotonic() + timeout_s, budget_end)
            if len(buf) > limit + head:  # cannot happen with a well-formed frame
                out.append(("killed", None, "malformed result frame"))
                return "bad", ended
        return "done", ended

    def attach_zygote(self, pid: int, ctl_w: int, status_r: int, req_w: int, req_r: int, res_r: int) -> None:
        """The zygote's ends of the pipes (see "the clean zygote"), then its ready report."""
        self.zygote_pid, self.ctl_w, self.status_r = pid, ctl_w, status_r
        self.req_w, self.req_r, self.res_r = req_w, req_r, res_r
        # Not req_r: its flags are those of the children's end too (one open pipe), which must block.
        for fd in (req_w, res_r):
            os.set_blocking(fd, False)
        fresh, locked = self._zygote_says(b"R")
        self.isolation["zygote"] = True
        self.isolation["freshpidns"] = bool(fresh) and self.isolation.get("pidns", False)
        self.isolation["imports"] = bool(locked & 1)
        self.isolation["hiddenclasses"] = bool(locked & 2)
        self.fresh = bool(fresh)

    def close_zygote(self) -> None:
        """End the zygote and wait for it: its children's CPU time then counts in the worker's (and
        so in the scorer's ``RUSAGE_CHILDREN``), which a zygote left to the kernel would lose."""
        self._settle()
        os.close(self.ctl_w)
        try:
            os.waitpid(self.zygote_pid, 0)
        except ChildProcessError:
            pass

    def _child_report(self) -> None:
        self.child_pid, fresh = self._zygote_says(b"P")
        self.in_fresh = bool(fresh)

    def _zygote_says(self, kind: bytes) -> tuple[int, int]:
        data = _read_exact(self.status_r, ZYGOTE_MESSAGE.size)
        if data is None:
            raise SystemExit("the zygote is gone")  # the scorer replaces this worker
        got, a, b = ZYGOTE_MESSAGE.unpack(data)
        if got != kind and not (kind == b"P" and got == b"p"):
            raise SystemExit(f"the zygote sent {got!r}, expected {kind!r}")
        return (a, got == b"P") if kind == b"P" else (a, b)

    def _drain(self) -> None:
        # Every process of the request is dead: what is left in either pipe is stale.
        for fd in (self.res_r, self.req_r):
            while select.select([fd], [], [], 0)[0] and os.read(fd, 1 << 16):
                pass

    def _kill(self) -> None:
        """Kill the child (and, in its own PID namespace, with it everything it forked)."""
        if self.child_pid is None:
            self._child_report()
        pid = self.child_pid
        if pid is None or pid <= 1:  # _child_report sets a child's pid; never signal a group or all
            raise SystemExit(f"the zygote reported pid {pid}")
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def _settle(self) -> None:
        """After a child was killed, before anything else: wait for the zygote's report of its end,
        then clean up. Deferred until after the reply to the scorer, which then need not wait."""
        if self.unsettled is None:
            return
        workdir, self.unsettled = self.unsettled, None
        self._zygote_says(b"S")
        self._reap()
        self._drain()
        self._clear_work_area(workdir)

    def _reap(self) -> None:
        """What the child left of processes, where it had no PID namespace of its own."""
        if not self.in_fresh:
            # No namespace of its own: what the program forked may live on. With a uid of this
            # worker's own, a process of that uid signals every process of it; the worker, init of
            # its PID namespace, reaps what was reparented to it.
            if self.uid is not None:
                self._kill_uid(self.uid)
            while True:
                try:
                    reaped, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if reaped == 0:
                    break

    def _kill_uid(self, uid: int) -> None:
        # No PID namespace, but a uid of this worker's own: a process of that uid signals every
        # process of it (not itself) until none is left, so nothing detached outlives the request.
        pid = os.fork()
        if pid == 0:
            try:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                for _ in range(1000):
                    os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            os._exit(0)
        os.waitpid(pid, 0)

    def _mount_work(self) -> None:
        """A fresh work tmpfs with the request directory ``r`` in it. ``r`` stays from one request
        to the next while no request changes anything (see _clear_work_area): its inode number, and
        the tmpfs's inode counter, are then the same for every request."""
        if self.mounts is None or not self.mounts.fresh(b"/work", self.work_options):
            raise SystemExit("cannot mount the work area")  # the scorer replaces this worker
        os.mkdir("/work/r", 0o700)
        if self.uid is not None:
            os.chown("/work/r", self.uid, self.uid)
        # Fixed times (mounted noatime): any change a request makes (an entry made or removed, a
        # mode, times, an owner, an attribute) shows in the change time, which no call can set back.
        for path in ("/work/r", "/work"):
            os.utime(path, ns=(0, 0))
        self.work_state = self._work_state()

    @staticmethod
    def _work_state() -> tuple:
        out = []
        for path in ("/work", "/work/r"):
            st = os.stat(path, follow_symlinks=False)
            out.append((st.st_ino, st.st_mode, st.st_nlink, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_uid,
                        st.st_gid))
        return tuple(out)

    def _work_area(self) -> str:
        if self.mounts is not None:
            return "/work/r"
        self.serial += 1
        workdir = os.path.join(self.workroot, str(self.serial))
        os.mkdir(workdir, 0o700)
        if self.uid is not None:
            os.chown(workdir, self.uid, self.uid)
        return workdir

    def _clear_work_area(self, workdir: str) -> None:
        if self.mounts is not None:
            # Every process of the request is dead. The area is as the worker left it when neither
            # its root nor the request's directory changed at all (change times included: making
            # and removing a file moves them, and the tmpfs's inode counter, which the next
            # request would see); otherwise the tmpfs is unmounted (lazily: it goes with its last
            # reference, which cannot fail on what the program made) and a fresh one mounted.
            # Unmounting costs ~2-3 ms of wall clock here (the kernel waits for a grace period),
            # so only then.
            try:
                clean = (self._work_state() == self.work_state and os.listdir("/work") == ["r"]
                         and not os.listdir("/work/r") and not _xattrs("/work") and not _xattrs("/work/r"))
            except OSError:
                clean = False
            if not clean:
                self.remounts += 1
                if not self.mounts.drop(b"/work"):
                    raise SystemExit("cannot unmount the work area")
                self._mount_work()
            return
        try:
            os.rmdir(workdir)
        except OSError:
            _rmtree(workdir)

    def run(self, units: list, timeout_s: float, budget_s: float | None = None) -> list:
        total = sum(len(calls) for _, calls, _ in units)
        if budget_s is None:
            budget_s = timeout_s * (total + len(units))
        budget_end = time.monotonic() + budget_s
        out: list = []
        while len(out) < total:
            left = budget_end - time.monotonic()
            if left <= 0:
                out.extend([("timeout", None, f"response budget of {budget_s:g} s spent")] * (total - len(out)))
                break
            self._settle()  # the previous child's end (of this request or the one before)
            start = len(out)
            workdir = self._work_area()
            # CPU: the budget left, for all threads of the child (whole seconds, at least one).
            cpu_s = int(left) + 1
            # The child reads its request itself: the zygote never holds a request's bytes.
            request = encode_message((start, workdir, cpu_s, units))
            self.child_pid = None  # the zygote reports it (read when first needed: no round trip here)
            write_all(self.ctl_w, b"f")
            loaded: set = set()
            ended = None
            why = "bad"
            try:
                why, ended = self._frames(units, total, timeout_s, out, loaded, budget_end, request)
            finally:
                if ended is None:  # still running: killed now, its end awaited after the reply
                    self._kill()
                    self.unsettled = workdir
                else:
                    self._reap()
                    self._drain()
                    self._clear_work_area(workdir)
            wait_status, cpu_ms = ended if ended is not None else (0, 0)
            if why == "eof" and self.in_fresh and os.WIFSIGNALED(wait_status) and \
                    os.WTERMSIG(wait_status) == signal.SIGKILL and cpu_ms >= cpu_s * 1000:
                # The init of a PID namespace ignores SIGXCPU: its CPU limit ends it at the hard
                # limit, with SIGKILL (the worker had not killed it yet: it ended by itself).
                wait_status = signal.SIGXCPU
            if why in ("timeout", "eof", "budget") and len(out) < total:
                failure = self._ending(why, wait_status, timeout_s, budget_s)
                unit, unit_end = self._unit_of(units, len(out))
                # A unit that never finished loading fails as a whole, not once per call; so does
                # a fail-fast unit (probes of one definition) at its first timeout or crash.
                n_fail = 1 if str(unit) in loaded and not units[unit][2] else unit_end - len(out)
                out.extend([failure] * n_fail)
        return out

    @staticmethod
    def _unit_of(units: list, position: int) -> tuple[int, int]:
        end = 0
        for index, (_, calls, _) in enumerate(units):
            end += len(calls)
            if position < end:
                return index, end
        raise IndexError(position)

    @staticmethod
    def _ending(why: str, wait_status: int | None, timeout_s: float, budget_s: float) -> tuple:
        if why == "timeout":
            return ("timeout", None, f"no result within {timeout_s:g} s wall clock")
        if why == "budget":
            return ("timeout", None, f"response budget of {budget_s:g} s spent")
        if wait_status is not None and os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            if sig == signal.SIGXCPU:
                return ("timeout", None, "CPU time limit")
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return ("killed", None, f"killed by {name}")
        code = os.WEXITSTATUS(wait_status) if wait_status is not None and os.WIFEXITED(wait_status) else -1
        return ("killed", None, f"exited (code {code}) without a result")



def _unmarshalled(code: object) -> object:
    # The scorer's own marshal output (trusted, like the rest of the request); left as it is when
    # it will not load, so that the child reports the failure as it always did.
    if type(code) is not bytes:
        return code
    try:
        return _loads(code)
    except Exception:
        return code


def _read_exact(fd: int, n: int) -> bytes | None:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _serve(worker: Worker, rfd: int, wfd: int) -> None:
    write_all(wfd, encode_message((HELLO, worker.isolation)))
    while True:
        head = _read_exact(rfd, MESSAGE_HEADER.size)
        if head is None:
            return
        body = _read_exact(rfd, MESSAGE_HEADER.unpack(head)[0])
        if body is None:
            return
        units, timeout_s, budget_s = read_request(marshal.loads(body))
        write_all(wfd, encode_message(worker.run(units, timeout_s, budget_s)))
        worker._settle()  # while the scorer reads the reply


def _rmtree(path: str) -> None:  # noqa: C901
    """Remove ``path`` and all below it, for the fallback without a work tmpfs (no mount namespace).

    Flattening, through directory descriptors and never following a symbolic link: every
    subdirectory found is first renamed to the top of the tree, so no recursion and no path of
    any length is needed (1,200 nested directories, chains longer than PATH_MAX), and at most
    two descriptors are open. Processes that could race it are dead by now (PID namespace, or the
    worker's own uid killed), and a link is unlinked, never followed.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top = os.open(path, flags)
    except OSError:
        return
    moved = 0
    try:
        for _ in range(1_000_000):  # bounded; each round removes at least one directory or stops
            pending = []
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.name)
                        else:
                            os.unlink(entry.name, dir_fd=top)
                    except OSError:
                        pass
            if not pending:
                break
            progress = False
            for name in pending:
                try:
                    fd = os.open(name, flags, dir_fd=top)
                except OSError:
                    continue
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            try:
                                if entry.is_dir(follow_symlinks=False):
                                    moved += 1
                                    os.rename(entry.name, f".rm{moved}", src_dir_fd=fd, dst_dir_fd=top)
                                    progress = True
                                else:
                                    os.unlink(entry.name, dir_fd=fd)
                            except OSError:
                                pass
                finally:
                    os.close(fd)
                try:
                    os.rmdir(name, dir_fd=top)
                    progress = True
                except OSError:
                    pass
            if not progress:
                break
    except OSError:
        pass
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _setup_namespaces(root_dir: str, uid: int, limits: dict) -> None:
    """Stage one: enter namespaces (needs ctypes), then exec a lean interpreter to serve in them.

    Namespaces, mounts and descriptors survive ``execv``. Without root a user namespace comes
    first (mapping the account's uid to the namespace's root), which is what lets an ordinary
    account create the others.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def unshare(flags: int) -> bool:
        return libc.unshare(ctypes.c_int(flags)) == 0

    def mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> bool:
        return libc.mount(source, target, fstype, ctypes.c_ulong(flags), data) == 0

    got = {"userns": False, "pidns": False, "netns": False, "ipcns": False, "utsns": False, "mountns": False}
    if os.geteuid() != 0:
        outer_uid, outer_gid = os.geteuid(), os.getegid()
        if unshare(CLONE_NEWUSER):
            try:
                for name, text in (("setgroups", "deny"), ("uid_map", f"0 {outer_uid} 1"),
                                   ("gid_map", f"0 {outer_gid} 1")):
                    with open(f"/proc/self/{name}", "w") as fh:
                        fh.write(text)
                got["userns"] = True
            except OSError:
                pass
    if unshare(CLONE_NEWPID):
        pid = os.fork()
        if pid:  # stays outside only to wait, then remove the root directory (empty on this side)
            os.close(0)
            os.close(1)
            _, status = os.waitpid(pid, 0)
            _rmtree(root_dir)
            os._exit(0)
        got["pidns"] = os.getpid() == 1
    got["netns"] = unshare(CLONE_NEWNET)
    got["ipcns"] = unshare(CLONE_NEWIPC)
    if unshare(CLONE_NEWUTS):
        got["utsns"] = libc.sethostname(b"sandbox", 7) == 0
    if unshare(CLONE_NEWNS) and mount(None, b"/", None, MS_REC | MS_PRIVATE, None):
        root = root_dir.encode()
        if mount(b"tmpfs", root, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=64k,nr_inodes=16,mode=0755"):
            os.mkdir(os.path.join(root_dir, "work"), 0o755)
            # The root the children see is read-only: only the per-request work area is writable.
            got["mountns"] = mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                   None)
    flags = ",".join(k for k, v in got.items() if v) or "-"
    os.execv(sys.executable, [sys.executable, "-I", "-S", __file__, *sys.argv[1:_N_ARGS + 2], root_dir, "serve",
                              flags, str(uid)])


# Representative model code. The first compile in a process initialises the parser and grows the
# allocator's arenas; done once here, every forked child inherits that state instead of paying
# for it (about 2 ms of CPU per child on the project's machines, more than the fork itself).
_WARM_UP = '''
def func_a(s, n=2):
    """Doc."""
    from math import gcd
    out = []
    for i, ch in enumerate(s):
        if ch.isalpha() and gcd(i + 3, 2) == 1:
            out.append(ch.upper())
        elif ch in 'aeiou':
            continue
        else:
            out.append(f"{ch}{i}")
    while n > 0:
        n -= 1
    return ''.join(sorted(out)) + s[::-1] * 2 + str(len(s) % 7)

def func_b(s1, s2):
    try:
        return s1[0] + s2[0] + func_b(s1[1:], s2[1:]) if s1 and s2 else s1 + s2
    except (IndexError, KeyError) as exc:
        raise ValueError(str(exc)) from None

class Helper:
    def __init__(self, s):
        self.s = {k: v for k, v in zip(s, range(len(s)))}

def main_solution(x):
    return func_b(func_a(x, 3), (x + 'abc').upper()) + str(len(Helper(x).s)) + ''.join(c for c in x if c != ' ')
'''


def _warm_up() -> None:
    import gc

    for _ in range(3):
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        exec(marshal.loads(marshal.dumps(compile(_WARM_UP, "<warm-up>", "exec"))), namespace)
        namespace["main_solution"]("Hello World 123")
    gc.collect()
    # Objects alive now are never collected in a child, so its collections don't write to (and
    # copy) the pages that hold them.
    gc.freeze()


def _prepare_jail(isolation: dict, drop_caps: bool) -> object:
    """Load ctypes (once, in the worker), make the worker non-dumpable, prepare what a child
    applies to itself, and probe that it works: a forked probe installs the filter and must be
    refused a socket. Returns libc, or None without ctypes."""
    try:
        import ctypes
    except ImportError:
        return None
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    # Non-dumpable: a process of the same uid cannot open /proc/<worker>/mem or ptrace it.
    isolation["nondumpable"] = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    prctl = libc.prctl
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    if drop_caps:
        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (ctypes.c_uint32 * 6)()
        _JAIL.capset = libc.capset
        _JAIL.capset.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        _JAIL.drop_caps = True
        _JAIL._keep = (ctypes.addressof(header), ctypes.addressof(data), header, data)
    machine = platform.machine()
    program = seccomp_program(machine, allow_mount=True)
    isolation["seccomp"] = False
    for name in ("setns", "unshare"):
        fn = getattr(libc, name)
        fn.argtypes = (ctypes.c_int, ctypes.c_int) if name == "setns" else (ctypes.c_int,)
        setattr(_JAIL, name, fn)
    if program is not None:
        buffer = ctypes.create_string_buffer(program, len(program))

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
        _JAIL.prctl, _JAIL.filter_addr = prctl, ctypes.addressof(fprog)
        # The child's filter, built per child (its own pid goes in): a buffer type of its size, made
        # here, since a child reaches ctypes' C types only (the zygote empties ctypes' namespace).
        child_size = len(child_seccomp_program(machine, 1) or b"")
        _JAIL.buffer, _JAIL.fprog, _JAIL.addressof, _JAIL.machine = (ctypes.c_char * child_size, Fprog,
                                                                     ctypes.addressof, machine)
        _JAIL._keep = _JAIL._keep + (buffer, fprog)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if _JAIL.install() and _JAIL.install_child(os.getpid()):
                    import socket

                    try:
                        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        code = 2
                    except PermissionError:
                        code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        isolation["seccomp"] = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not isolation["seccomp"]:
            _JAIL.prctl = None
    return libc


def _serve_stage(limits: dict, root_dir: str, flags: str, uid: int, lock: bool = True) -> None:
    for name in PRELOAD:
        __import__(name)
    _warm_up()
    # Requests and replies move on private descriptors; 0/1 go to /dev/null so nothing the worker
    # or a child prints can corrupt the protocol.
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # inherited by every child
        os.dup2(devnull, target)
    # RLIMIT_AS is set relative to the worker's own size, known only before /proc disappears.
    with open("/proc/self/statm") as fh:
        vm_bytes = int(fh.read().split()[0]) * resource.getpagesize()
    got = set(flags.split(","))
    userns = "userns" in got
    # In a user namespace of its own the worker is that namespace's root: children keep its uid
    # (the account's, outside) and drop every capability instead of changing uid.
    root = os.geteuid() == 0 and not userns
    isolation = {"uid_drop": root, "userns": userns, "uid": uid if root else os.geteuid(),
                 "pidns": "pidns" in got and os.getpid() == 1, "netns": "netns" in got, "ipcns": "ipcns" in got,
                 "utsns": "utsns" in got, "mountns": "mountns" in got, "chroot": False, "worktmpfs": False,
                 "seccomp": False, "nondumpable": False, "zygote": False, "freshpidns": False, "imports": False,
                 "hiddenclasses": False,
                 "work_bytes": limits["work_bytes"],
                 "work_inodes": limits["work_inodes"], "nproc": limits["nproc"]}
    libc = _prepare_jail(isolation, drop_caps=userns)
    # The zygote's own PID namespace, to return to before each fresh one (opened while /proc is there).
    pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY) if isolation["pidns"] and libc is not None else -1
    # ctypes' own mappings are in the worker's size too.
    with open("/proc/self/statm") as fh:
        vm_bytes = max(vm_bytes, int(fh.read().split()[0]) * resource.getpagesize())
    limits["as_bytes"] += vm_bytes + (64 << 20)
    mounts = None
    if os.geteuid() == 0 and flags != "off" and isolation["mountns"]:
        try:
            os.chroot(root_dir)
            os.chdir("/")
            isolation["chroot"] = True
        except OSError:
            pass
        if isolation["chroot"] and libc is not None:
            mounts = _Mounts(libc)
            options = (f"size={limits['work_bytes']},nr_inodes={limits['work_inodes']},mode=0700").encode()
            isolation["worktmpfs"] = mounts.fresh(b"/work", options) and mounts.drop(b"/work")
    if not isolation["worktmpfs"]:
        isolation["work_inodes"] = 0
    worker = Worker(limits, root_dir, isolation, mounts)
    if isolation["seccomp"]:
        # Last: from here on neither the worker nor any child it forks can make a denied call.
        isolation["seccomp"] = _JAIL.install()
    # Before the first request: the process every child forks from.
    _start_zygote(worker, rfd, wfd, pidns_fd, lock)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        _serve(worker, rfd, wfd)
        worker.close_zygote()
    finally:
        if not isolation["mountns"]:
            _rmtree("/work" if isolation["chroot"] else os.path.join(root_dir, "work"))
    os._exit(0)


def _start_zygote(worker: Worker, rfd: int, wfd: int, pidns_fd: int, lock: bool) -> None:
    """Fork the zygote (see "the clean zygote") and hand the worker its ends of the pipes."""
    ctl_r, ctl_w = os.pipe()
    status_r, status_w = os.pipe()
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    settings = (worker.rlimits, worker.uid, worker.limits["max_output"])
    pid = os.fork()
    if pid == 0:
        for fd in (rfd, wfd, ctl_w, status_r, req_w, res_r):
            os.close(fd)
        try:
            _zygote(ctl_r, status_w, req_r, res_w, pidns_fd, settings, lock)
        except _ChildStart:
            raise
        except BaseException:
            pass
        os._exit(1)
    for fd in (ctl_r, status_w, res_w):
        os.close(fd)
    if pidns_fd >= 0:
        os.close(pidns_fd)
    worker.attach_zygote(pid, ctl_w, status_r, req_w, req_r, res_r)


_N_ARGS = len(LIMIT_ARGS)  # the limits, as main() reads them


def worker_args(limits: dict, namespaces: bool, imports: str = "allowlist") -> list[str]:
    """The worker's argv after its path, but for ROOT_DIR (the scorer appends it per worker): the
    limits, then ``1``/``0`` (namespaces), with ``:open`` when imports are not locked (tests of the
    layers below the import allowlist)."""
    if imports not in ("allowlist", "open"):
        raise ValueError(f"imports must be 'allowlist' or 'open', got {imports!r}")
    flag = ("1" if namespaces else "0") + (":open" if imports == "open" else "")
    return [str(limits[name]) for name in LIMIT_ARGS] + [flag]


def main() -> None:
    """argv: AS_BYTES FSIZE NOFILE NPROC MAX_OUTPUT WORK_BYTES WORK_INODES NAMESPACES(0|1[:open]) ROOT_DIR
    [serve FLAGS UID] (``LIMIT_ARGS``, then ``worker_args``' flag, then the root directory)."""
    limits = {name: int(value) for name, value in zip(LIMIT_ARGS, sys.argv[1:_N_ARGS + 1])}
    ns_flag, root_dir = sys.argv[_N_ARGS + 1], sys.argv[_N_ARGS + 2]
    want_ns, lock = ns_flag.split(":")[0] == "1", not ns_flag.endswith(":open")
    if len(sys.argv) > _N_ARGS + 5 and sys.argv[_N_ARGS + 3] == "serve":
        _serve_stage(limits, root_dir, sys.argv[_N_ARGS + 4], int(sys.argv[_N_ARGS + 5]), lock)
    elif want_ns:
        _setup_namespaces(root_dir, UID_BASE + os.getpid(), limits)
    else:
        _serve_stage(limits, root_dir, "off", UID_BASE + os.getpid(), lock)


if __name__ == "__main__":
    _start_args = None
    try:
        main()
    except _ChildStart as _started:  # a child of the zygote: its stack is unwound to here
        _start_args = _started.args[0]
        _started.__traceback__ = None
        del _started
    if _start_args is not None:
        _child_main(_start_args)
