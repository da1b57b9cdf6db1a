"""The seccomp filters, assembled here: classic BPF, the system-call tables of x86-64 and aarch64,
the allowlist the worker, its zygote and every child share, and the filter each child adds on top.

:mod:`.seccomp` installs them (the mechanism: its description, its risk, its steps); this module
only builds bytes. tests/test_sandbox_zygote.py checks both tables against the kernel's
<asm/unistd_64.h> and <asm-generic/unistd.h>. Standard library only.
"""

from __future__ import annotations

import struct

from .base import CLONE_NEWPID, NAMESPACE_FLAGS

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
