"""``utsns``: a UTS namespace whose host name is ``sandbox``: the machine's is neither read nor set."""

from __future__ import annotations

from .base import CLONE_NEWUTS, Jail, Mechanism


def enter(jail: Jail) -> bool:
    return jail.unshare_ns(CLONE_NEWUTS) and jail.lib().sethostname(b"sandbox", 7) == 0


MECHANISM = Mechanism("utsns", "utsns", "model code shares the machine's host name", steps=(enter,))
