"""The isolation mechanisms' registry and the ordered lists of steps the worker runs.

As nsjail's ``contain.cc`` reads: each mechanism is a module of this package (its description, its
risk and its code); this module says which exist (:data:`MECHANISMS`, the order the worker reports
them in) and in what order their steps run, stage by stage. A new mechanism is one module and its
lines here; tests/test_isolation_registry.py ties the two (every step of every mechanism runs in
exactly one list, every listed step is a mechanism's, every mechanism is reported by a real worker).

A step returns True/False (the mechanism is, or is not, in force: the last step of a mechanism to
answer decides), or None (a preparation for a later step). A child step that returns False ends
the child before any model code runs. Standard library only.
"""

from __future__ import annotations

from . import (
    chroot,
    freshpidns,
    hiddenclasses,
    imports,
    ipcns,
    mountns,
    netns,
    nondumpable,
    pidns,
    rlimits,
    seccomp,
    uid_drop,
    userns,
    utsns,
    worktmpfs,
    zygote,
)
from .base import Mechanism

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from collections.abc import Callable

# Every mechanism, in the order the worker's hello reports them and the scorer lists them.
MECHANISMS: tuple[Mechanism, ...] = (
    uid_drop.MECHANISM, userns.MECHANISM, pidns.MECHANISM, netns.MECHANISM, ipcns.MECHANISM, utsns.MECHANISM,
    mountns.MECHANISM, chroot.MECHANISM, worktmpfs.MECHANISM, seccomp.MECHANISM, nondumpable.MECHANISM,
    zygote.MECHANISM, freshpidns.MECHANISM, imports.MECHANISM, hiddenclasses.MECHANISM, rlimits.MECHANISM,
)

# Stage one (the first interpreter, ctypes loaded): enter the namespaces, then exec a lean
# interpreter that serves inside them (namespaces, mounts and descriptors survive execv). Without
# root the user namespace comes first: it is what lets an ordinary account create the others.
ENTER: tuple[Callable, ...] = (userns.enter, pidns.enter, netns.enter, ipcns.enter, utsns.enter, mountns.enter)
# The serving worker, once: what reads the machine (ctypes, /proc) before the chroot, then the
# chroot and the work area, the filter on itself last of all (the zygote and every child inherit it),
# then the zygote.
IN_WORKER: tuple[Callable, ...] = (
    nondumpable.setup, userns.setup, pidns.setup, uid_drop.setup, seccomp.setup, freshpidns.prepare,
    rlimits.setup, chroot.setup, worktmpfs.setup, seccomp.install, zygote.start,
)
# The zygote, once, before the first request (the import allowlist needs ctypes whole for the
# hidden classes first).
IN_ZYGOTE: tuple[Callable, ...] = (imports.prepare, hiddenclasses.setup, imports.setup, freshpidns.probe)
# Each child, before model code (its seccomp filter last: it refuses what the others call).
IN_CHILD: tuple[Callable, ...] = (rlimits.child, uid_drop.child, userns.child, seccomp.child)
STAGES = {"enter": ENTER, "worker": IN_WORKER, "zygote": IN_ZYGOTE, "child": IN_CHILD}

ISOLATION: dict[str, Mechanism] = {m.name: m for m in MECHANISMS}
OWNER: dict[Callable, str] = {step: m.name for m in MECHANISMS for step in m.steps}


def named(stage: tuple[Callable, ...]) -> tuple[tuple[str, Callable], ...]:
    """A stage's steps with the mechanism each belongs to."""
    return tuple((OWNER[step], step) for step in stage)


def _needs() -> dict[str, str]:
    needs: dict[str, str] = {}
    for m in MECHANISMS:
        if m.need is not None:
            other = needs.setdefault(m.need, m.risk)
            if other != m.risk:
                raise ValueError(f"isolation mechanism {m.name!r}: need {m.need!r} already has another risk text")
    return needs


def _check() -> None:
    if len(ISOLATION) != len(MECHANISMS):
        raise ValueError("two isolation mechanisms share a name")
    listed = [step for stage in STAGES.values() for step in stage]
    for step in listed:
        if step not in OWNER:
            raise ValueError(f"step {step.__qualname__} is no mechanism's")
        if listed.count(step) != 1:
            raise ValueError(f"step {step.__qualname__} is listed more than once")
    for m in MECHANISMS:
        for step in m.steps:
            if step not in listed:
                raise ValueError(f"isolation mechanism {m.name!r}: step {step.__qualname__} is in no stage")


_check()
RISKS: dict[str, str] = _needs()  # need -> what is unprotected without it
FULL_NEEDS: tuple[str, ...] = tuple(RISKS)  # what ``full`` needs, in registry order (``uid`` first)
