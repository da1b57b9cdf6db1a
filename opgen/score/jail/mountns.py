"""``mountns``: a mount namespace, with a private tmpfs over the root directory, remounted read-only.

Together with :mod:`.chroot` (the worker ``chroot``s into that tmpfs) model code sees no file of the
machine at all: no data or answer file, no ``/proc``, no shell, not opgen itself (without it a child
imported the library's operators and scored 1.0 defining none).
"""

from __future__ import annotations

import os

from .base import (
    CLONE_NEWNS,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    Jail,
    Mechanism,
)

RISK = ("model code sees the machine's files: data and answer files, /proc of other processes, and opgen's own "
        "operators, which it can import to pass without defining any")


def enter(jail: Jail) -> bool:
    """Stage one: a mount namespace, mounts private, a small tmpfs over the root directory with the
    work area's mount point in it, remounted read-only (only the work area is writable)."""
    if not (jail.unshare_ns(CLONE_NEWNS) and jail.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)):
        return False
    root = jail.root_dir.encode()
    if not jail.mount(b"tmpfs", root, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=64k,nr_inodes=16,mode=0755"):
        return False
    os.mkdir(os.path.join(jail.root_dir, "work"), 0o755)
    return jail.mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


MECHANISM = Mechanism("mountns", "mountns", RISK, steps=(enter,))
