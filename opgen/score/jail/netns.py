"""``netns``: a network namespace, whose only interface (loopback) is down: no network at all."""

from __future__ import annotations

from .base import CLONE_NEWNET, Jail, Mechanism


def enter(jail: Jail) -> bool:
    return jail.unshare_ns(CLONE_NEWNET)


MECHANISM = Mechanism("netns", "netns", "model code has the machine's network", steps=(enter,))
