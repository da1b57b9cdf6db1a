"""``nondumpable``: the worker is made non-dumpable, so a process of the same uid cannot open
``/proc/<worker>/mem`` or ptrace it. It hardens the worker, not the child: ``full`` does not need
it and the level does not name it."""

from __future__ import annotations

from .base import PR_SET_DUMPABLE, Jail, Mechanism


def setup(jail: Jail) -> bool:
    return jail.lib().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


MECHANISM = Mechanism("nondumpable", None, steps=(setup,), in_level=False)
