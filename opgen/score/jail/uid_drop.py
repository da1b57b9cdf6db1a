"""``uid_drop`` (root): children run as a uid of their worker's own, owner of no file.

Each worker's children run as :data:`UID_BASE` + the host pid of the worker's first stage (unique
among live workers; pid_max is at most 2**22, a range no account uses): ``RLIMIT_NPROC`` then binds
and counts only that worker's children — a fork bomb in one worker cannot starve another scorer's
children, as a shared uid such as nobody's would let it — and the machine's files are out of reach.
Where children have no PID namespace of their own, every process of that uid is killed after each
request (:func:`empty`). Without root, :mod:`.userns` meets the same need.
"""

from __future__ import annotations

import os
import signal

from .base import Jail, Mechanism

UID_BASE = 2_000_000_000
RISK = ("model code runs as the scorer's own uid: it can read, write and delete every file the account "
        "can reach and signal the account's processes (the scorer is made non-dumpable, so /proc/<pid>/mem "
        "and ptrace of it stay closed)")


def setup(jail: Jail) -> bool:
    """The serving worker: in force when it is root on the host (not in a user namespace)."""
    if not jail.root():
        jail.report["uid"] = os.geteuid()
        return False
    jail.child_uid = jail.report["uid"] = jail.uid
    return True


def child(jail: Jail, pid: int, cpu_s: int) -> bool:
    """A child, before model code: become the worker's own uid and gid, with no groups."""
    uid = jail.child_uid
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    return True


def empty(uid: int) -> None:
    """No PID namespace, but a uid of this worker's own: a process of that uid signals every process
    of it (not itself) until none is left, so nothing detached outlives the request."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(1000):
                os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


MECHANISM = Mechanism("uid_drop", "uid", RISK, steps=(setup, child))
