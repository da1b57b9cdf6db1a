"""``freshpidns``: per request the zygote returns to its own PID namespace (``setns``) and makes a
new one (``unshare(CLONE_NEWPID)``): each child is pid 1 of a namespace of its own, and everything
it forks dies with it. Pid numbers then carry no bits from one request to the next (on main a program
that forked 300 times moved the next one's ``getpid()`` by 301), and no process outlives its request."""

from __future__ import annotations

import os

from .base import CLONE_NEWPID, Jail, Mechanism

RISK = ("consecutive responses share one PID namespace: pid numbers carry bits from one to the next, and what a "
        "program forks is removed by signalling, not with its namespace")


def prepare(jail: Jail) -> None:
    """The serving worker, while /proc is there: its own PID namespace (the zygote returns to it
    before each fresh one) and the calls to make one."""
    libc = jail.lib()
    jail.setns, jail.unshare = libc.setns, libc.unshare
    if jail.report.get("pidns"):
        jail.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)


def fresh(jail: Jail) -> bool:
    """Make the zygote's next fork the init of a new PID namespace (once per request)."""
    if jail.setns is None or jail.pidns_fd < 0:
        return False
    return jail.setns(jail.pidns_fd, CLONE_NEWPID) == 0 and jail.unshare(CLONE_NEWPID) == 0


def probe(jail: Jail) -> bool:
    """The zygote, once: a fork into a fresh namespace is its init, and is gone at once."""
    if not fresh(jail):
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(0 if os.getpid() == 1 else 1)
    _, code = os.waitpid(pid, 0)
    return code == 0


MECHANISM = Mechanism("freshpidns", "freshpidns", RISK, steps=(prepare, probe))
