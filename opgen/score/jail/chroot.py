"""``chroot``: the worker ``chroot``s into the private read-only tmpfs :mod:`.mountns` made: every
child starts inside it, with the work area (:mod:`.worktmpfs`) its only writable directory."""

from __future__ import annotations

import os

from .base import Jail, Mechanism
from .mountns import RISK


def setup(jail: Jail) -> bool:
    """The serving worker, after everything it reads from the machine's files (/proc included)."""
    if not (os.geteuid() == 0 and jail.report.get("mountns")):
        return False
    try:
        os.chroot(jail.root_dir)
        os.chdir("/")
    except OSError:
        return False
    return True


MECHANISM = Mechanism("chroot", "chroot", RISK, steps=(setup,))
