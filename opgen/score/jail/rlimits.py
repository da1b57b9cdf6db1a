"""``rlimits``: resource limits, on the worker once (inherited by every child) and per child.

The worker: no core dumps (``RLIMIT_CORE`` 0), at most ``fsize_bytes`` written to a file
(``RLIMIT_FSIZE``; ``SIGXFSZ`` ignored, so a write past it raises instead of killing). Each child,
before model code: CPU seconds (``RLIMIT_CPU``: the response's budget left, whole seconds, hard limit
one more), address space (``RLIMIT_AS``: ``memory_mb`` plus the worker's own size), open files
(``RLIMIT_NOFILE``), processes and threads of its uid (``RLIMIT_NPROC``; without root it would count
every process of the account, so it stays per child). What is set is in the isolation report
(``limits``). Always in force; ``full`` needs more, and the level ``rlimits`` means only this.
"""

from __future__ import annotations

import resource
import signal

from .base import Jail, Mechanism


def _size() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def measure(jail: Jail) -> None:
    """The worker's size so far (RLIMIT_AS is relative to it, known only while /proc is there)."""
    jail.vm_bytes = max(jail.vm_bytes, _size())


def setup(jail: Jail) -> bool:
    """The serving worker, after ctypes is loaded (its mappings count in the worker's size) and
    before the chroot."""
    measure(jail)
    limits = jail.limits
    limits["as_bytes"] += jail.vm_bytes + (64 << 20)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write raises OSError instead of killing
    jail.rlimits = ((resource.RLIMIT_AS, (limits["as_bytes"],) * 2),
                    (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
                    (resource.RLIMIT_NPROC, (limits["nproc"],) * 2))
    jail.report["nproc"] = limits["nproc"]
    jail.report["limits"] = {
        "RLIMIT_CORE": list(resource.getrlimit(resource.RLIMIT_CORE)),
        "RLIMIT_FSIZE": list(resource.getrlimit(resource.RLIMIT_FSIZE)),
        "RLIMIT_AS": limits["as_bytes"], "RLIMIT_NOFILE": limits["nofile"], "RLIMIT_NPROC": limits["nproc"],
        "RLIMIT_CPU": "per response: its budget left", "SIGXFSZ": "ignored"}
    return True


def child(jail: Jail, pid: int, cpu_s: int) -> bool:
    """A child, first: its CPU seconds, then the per-child limits."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    for limit, value in jail.rlimits:
        resource.setrlimit(limit, value)
    return True


MECHANISM = Mechanism("rlimits", None, steps=(setup, child), in_level=False)
