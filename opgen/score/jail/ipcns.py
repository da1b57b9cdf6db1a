"""``ipcns``: an IPC namespace: SysV shared memory, semaphores, message queues and POSIX queues of
its own, none shared with the machine or outliving the worker."""

from __future__ import annotations

from .base import CLONE_NEWIPC, Jail, Mechanism


def enter(jail: Jail) -> bool:
    return jail.unshare_ns(CLONE_NEWIPC)


MECHANISM = Mechanism("ipcns", "ipcns", "SysV IPC and POSIX message queues are the machine's: data parked there "
                      "can outlive the scorer", steps=(enter,))
