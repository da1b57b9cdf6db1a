"""The seccomp filters, assembled here: classic BPF, the system-call tables of x86-64 and aarch64,
the allowlist the worker, its zygote and every child share, and the filter each child adds on top.

:mod:`.seccomp` installs them (the mechanism: its description, its risk, its steps); this module
only builds bytes. tests/test_sandbox_zygote.py checks both tables against the kernel's
<asm/unistd_64.h> and <asm-generic/unistd.h>. Standard library only.
"""

from __future__ import annotations

import struct

from .base import CLONE_NEWPID, NAMESPACE_FLAGS

# The system-call numbers the filters name: x86-64's and aarch64's (whose numbers are the kernel's
# generic table); tests/test_sandbox_zygote.py checks both against the kernel's <asm/unistd_64.h>
# and <asm-generic/unistd.h>. aarch64 has no open/stat/fork/... (only the *at calls): None there,
# and a name missing from its table is simply not there to allow.
_NUMBERS: dict[str, tuple[int, int | None]] = {
    "read": (0, 63), "write": (1, 64), "open": (2, None), "close": (3, 57), "stat": (4, None), "fstat": (5, 80),
    "lstat": (6, None), "poll": (7, None), "lseek": (8, 62), "mmap": (9, 222), "mprotect": (10, 226),
    "munmap": (11, 215), "brk": (12, 214), "rt_sigaction": (13, 134), "rt_sigprocmask": (14, 135),
    "rt_sigreturn": (15, 139), "ioctl": (16, 29), "pread64": (17, 67), "pwrite64": (18, 68), "readv": (19, 65),
    "writev": (20, 66), "access": (21, None), "pipe": (22, None), "select": (23, None), "sched_yield": (24, 124),
    "mremap": (25, 216), "msync": (26, 227), "mincore": (27, 232), "madvise": (28, 233), "dup": (32, 23),
    "dup2": (33, None), "nanosleep": (35, 101), "getitimer": (36, 102), "alarm": (37, None), "setitimer": (38, 103),
    "getpid": (39, 172), "sendfile": (40, 71), "socket": (41, 198), "clone": (56, 220), "fork": (57, None),
    "vfork": (58, None), "execve": (59, 221), "exit": (60, 93), "wait4": (61, 260), "kill": (62, 129),
    "uname": (63, 160), "fcntl": (72, 25), "flock": (73, 32), "fsync": (74, 82), "fdatasync": (75, 83),
    "truncate": (76, 45), "ftruncate": (77, 46), "getdents": (78, None), "getcwd": (79, 17), "chdir": (80, 49),
    "fchdir": (81, 50), "rename": (82, None), "mkdir": (83, None), "rmdir": (84, None), "creat": (85, None),
    "link": (86, None), "unlink": (87, None), "symlink": (88, None), "readlink": (89, None), "chmod": (90, None),
    "fchmod": (91, 52), "chown": (92, None), "fchown": (93, 55), "lchown": (94, None), "umask": (95, 166),
    "gettimeofday": (96, 169), "getrlimit": (97, 163), "getrusage": (98, 165), "sysinfo": (99, 179),
    "times": (100, 153), "ptrace": (101, 117), "getuid": (102, 174), "getgid": (104, 176), "setuid": (105, 146),
    "setgid": (106, 144), "geteuid": (107, 175), "getegid": (108, 177), "setpgid": (109, 154), "getppid": (110, 173),
    "getpgrp": (111, None), "setsid": (112, 157), "getgroups": (115, 158), "setgroups": (116, 159),
    "setresuid": (117, 147), "getresuid": (118, 148), "setresgid": (119, 149), "getresgid": (120, 150),
    "getpgid": (121, 155), "getsid": (124, 156), "capget": (125, 90), "capset": (126, 91), "rt_sigpending": (127, 136),
    "rt_sigtimedwait": (128, 137), "rt_sigqueueinfo": (129, 138), "rt_sigsuspend": (130, 133),
    "sigaltstack": (131, 132), "utime": (132, None), "statfs": (137, 43), "fstatfs": (138, 44),
    "getpriority": (140, 141), "sched_getparam": (143, 121), "sched_getscheduler": (145, 120), "prctl": (157, 167),
    "arch_prctl": (158, None), "setrlimit": (160, 164), "chroot": (161, 51), "mount": (165, 40), "umount2": (166, 39),
    "gettid": (186, 178), "getxattr": (191, 8), "lgetxattr": (192, 9), "fgetxattr": (193, 10), "listxattr": (194, 11),
    "llistxattr": (195, 12), "flistxattr": (196, 13), "tkill": (200, 130), "time": (201, None), "futex": (202, 98),
    "sched_getaffinity": (204, 123), "epoll_create": (213, None), "getdents64": (217, 61), "set_tid_address": (218, 96),
    "restart_syscall": (219, 128), "fadvise64": (221, 223), "clock_gettime": (228, 113), "clock_getres": (229, 114),
    "clock_nanosleep": (230, 115), "exit_group": (231, 94), "epoll_wait": (232, None), "epoll_ctl": (233, 21),
    "tgkill": (234, 131), "utimes": (235, None), "waitid": (247, 95), "openat": (257, 56), "mkdirat": (258, 34),
    "fchownat": (260, 54), "futimesat": (261, None), "newfstatat": (262, 79), "unlinkat": (263, 35),
    "renameat": (264, 38), "linkat": (265, 37), "symlinkat": (266, 36), "readlinkat": (267, 78), "fchmodat": (268, 53),
    "faccessat": (269, 48), "pselect6": (270, 72), "ppoll": (271, 73), "unshare": (272, 97),
    "set_robust_list": (273, 99), "get_robust_list": (274, 100), "utimensat": (280, 88), "epoll_pwait": (281, 22),
    "eventfd2": (290, 19), "epoll_create1": (291, 20), "dup3": (292, 24), "pipe2": (293, 59), "preadv": (295, 69),
    "pwritev": (296, 70), "rt_tgsigqueueinfo": (297, 240), "prlimit64": (302, 261), "setns": (308, 268),
    "getcpu": (309, 168), "renameat2": (316, 276), "getrandom": (318, 278), "membarrier": (324, 283),
    "copy_file_range": (326, 285), "preadv2": (327, 286), "pwritev2": (328, 287), "statx": (332, 291),
    "rseq": (334, 293), "pidfd_send_signal": (424, 424), "pidfd_open": (434, 434), "clone3": (435, 435),
    "close_range": (436, 436), "faccessat2": (439, 439), "epoll_pwait2": (441, 441),
}
SYSCALLS = {arch: {name: nr for name, nrs in _NUMBERS.items() if (nr := nrs[i]) is not None}
            for i, arch in enumerate(("x86_64", "aarch64"))}
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
