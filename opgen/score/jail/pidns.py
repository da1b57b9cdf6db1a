"""``pidns``: a PID namespace whose init is the worker.

Signals reach nothing outside; after each request the worker, init of the namespace, reaps what was
reparented to it (:func:`reap_orphans`); with :mod:`.freshpidns` each child is the init of a
namespace of its own, and everything it forks dies with it.
"""

from __future__ import annotations

import os
import signal

from .base import CLONE_NEWPID, Jail, Mechanism
from .worktmpfs import rmtree

RISK = ("processes a program forks or detaches can outlive its request (and, under a shared uid, kill later "
        "responses' children)")


def enter(jail: Jail) -> bool:
    """Stage one: a new PID namespace; the process forked into it goes on (pid 1), the one left
    outside only waits for it, then removes the root directory (empty on its side) and ends as it
    ended (the scorer, whose child it is, then reads how the worker ended)."""
    if not jail.unshare_ns(CLONE_NEWPID):
        return False
    pid = os.fork()
    if pid:
        os.close(0)
        os.close(1)
        _, status = os.waitpid(pid, 0)
        rmtree(jail.root_dir)
        if os.WIFSIGNALED(status):
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
    return os.getpid() == 1


def setup(jail: Jail) -> bool:
    """The serving worker: in force when it is the init of the namespace stage one entered."""
    return "pidns" in jail.entered and os.getpid() == 1


def reap_orphans() -> None:
    """What a child left of processes, reparented to the worker (init of its namespace)."""
    while True:
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if reaped == 0:
            break


MECHANISM = Mechanism("pidns", "pidns", RISK, steps=(enter, setup))
