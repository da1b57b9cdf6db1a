"""What the isolation mechanisms share: the :class:`Mechanism` record, the :class:`Jail` their steps
set up and read, and Linux's constants. Standard library only (see the package's docstring)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Linux's constants (<sched.h>, <sys/mount.h>, <sys/prctl.h>, <linux/seccomp.h>).
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
CLONE_NEWUSER, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP = 0x10000000, 0x08000000, 0x04000000, 0x02000000
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
    CLONE_NEWCGROUP
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME = 1, 2, 4, 8, 32, 1024
MS_REC, MS_PRIVATE, MNT_DETACH = 0x4000, 1 << 18, 2
PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 4, 22, 38, 2


class Mechanism:
    """One isolation mechanism: what the scorer reads of it and the code that applies it, together.

    ``need``: the requirement of ``full`` isolation it meets (its own name, or a name shared by
    alternatives: ``uid`` is met by ``uid_drop`` or ``userns``); None when ``full`` does not need it.
    ``risk``: what is unprotected when no mechanism meeting ``need`` is in force (required with
    ``need``; alternatives state the same text). ``in_level``: named in ``partial(...)``.
    ``steps``: the functions that apply it, each placed in one of the ordered lists of
    :mod:`.steps` (the worker runs those lists; a description without code cannot be made, so no
    mechanism can be described that no worker applies)."""

    __slots__ = ("name", "need", "risk", "in_level", "steps")
    name: str
    need: str | None
    risk: str
    in_level: bool
    steps: tuple[Callable, ...]

    def __init__(self, name: str, need: str | None, risk: str = "", *, steps: tuple[Callable, ...],
                 in_level: bool = True) -> None:
        if not isinstance(steps, tuple) or not steps or not all(callable(s) for s in steps):
            raise TypeError(f"isolation mechanism {name!r}: its description needs the code that applies it "
                            "(steps=(function, ...), each placed in an ordered list of opgen/score/jail/steps.py)")
        if need is not None and not risk:
            raise ValueError(f"isolation mechanism {name!r}: a mechanism 'full' needs states its risk")
        for attr, value in (("name", name), ("need", need), ("risk", risk), ("in_level", in_level),
                            ("steps", steps)):
            object.__setattr__(self, attr, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Mechanism is frozen ({name!r})")

    def __repr__(self) -> str:
        return f"Mechanism({self.name!r}, need={self.need!r})"


class ChildStart(BaseException):
    """Raised in a child right after the zygote's fork: the stack unwinds to the script's top, so
    no frame of the zygote's (or of the worker's set-up, with its ctypes objects) stays reachable.
    Its argument is a one-item list the child takes its start from (and empties)."""


class Jail:
    """The state the worker's steps share, made once per stage (stage one, then the serving worker):
    what the scorer asked for (``limits``, ``root_dir``, ``lock_imports``), what stage one entered
    (``entered``), the report the hello carries (``report``: mechanism -> in force, and facts), and
    what one step prepares for a later one (ctypes' functions, the filter, the work area, the
    zygote's pipes). A child drops every reference to it before model code runs (child.py)."""

    def __init__(self, limits: dict, root_dir: str, uid: int, *, entered: frozenset[str] = frozenset(),
                 lock_imports: bool = True) -> None:
        self.limits = dict(limits)
        self.root_dir = root_dir
        self.uid = uid  # the uid of this worker's own (uid_drop.UID_BASE + stage one's pid)
        self.entered = entered
        self.lock_imports = lock_imports
        self.report: dict[str, Any] = {}
        self.child_uid: int | None = None  # the uid children change to (uid_drop)
        self.libc: Any = None
        self.machine = ""
        self.vm_bytes = 0  # the worker's own size, measured while /proc is there
        self.channel: tuple[int, int] = (-1, -1)  # the scorer's pipes (the zygote closes them)
        self.pidns_fd = -1  # the zygote's own PID namespace, to return to (freshpidns)
        self.setns: Any = None
        self.unshare: Any = None
        self.prctl: Any = None  # set where the seccomp filter works (seccomp)
        self.filter_addr = 0
        self.child_filter: Any = None  # (buffer type, fprog type, addressof) for the child's own filter
        self.capset: Any = None  # (capset, header address, data address) where children drop capabilities
        self.rlimits: tuple = ()  # per child: (resource, (soft, hard)) pairs
        self.area: Any = None  # the work area (worktmpfs.WorkArea)
        self.allowed: dict = {}  # the modules model code may import (imports.prepare)
        self.zygote: Any = None  # the zygote's pid and pipes (zygote.start)
        self.in_zygote: tuple[tuple[str, Callable], ...] = ()  # steps.IN_ZYGOTE with their mechanisms
        self.in_child: tuple[Callable, ...] = ()  # steps.IN_CHILD
        self._keep: list = []  # ctypes objects the prepared addresses point into

    def lib(self) -> Any:
        """libc through ctypes, loaded on first use (the scorer imports these modules too, and needs
        no ctypes for them)."""
        if self.libc is None:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.unshare.argtypes = (ctypes.c_int,)
            libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
            libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
            libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
            libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
            self.libc = libc
        return self.libc

    def unshare_ns(self, flags: int) -> bool:
        return self.lib().unshare(flags) == 0

    def mount(self, source: bytes | None, target: bytes, fstype: bytes | None, flags: int,
              data: bytes | None) -> bool:
        return self.lib().mount(source, target, fstype, flags, data) == 0

    def keep(self, *objects: object) -> None:
        self._keep.extend(objects)

    def root(self) -> bool:
        """Root on the host (not the root of a user namespace of our own)."""
        return os.geteuid() == 0 and "userns" not in self.entered
