"""``zygote``: every child forks from a clean zygote, never from the worker.

The worker reads requests, so its memory holds earlier responses' code, inputs and results (on main
at 4d92aa4 a program that defined no operator read the worker's inherited memory through ctypes and
found an earlier response's result for the same input). So before the first request the worker
forks a ZYGOTE, which never receives a request's bytes. Per request the worker writes one byte on
the zygote's control pipe; the zygote forks a child (into a fresh PID namespace where it can:
:mod:`.freshpidns`) and reports its pid, then its wait status and CPU time (:data:`MESSAGE`). The
child itself reads its request from the request pipe (worker -> child) and writes its frames on the
result pipe (child -> worker); both pipes outlive children, so the worker empties them after each
child (every writer and reader of the request is dead by then). In the child the stack is unwound to
the script's top before any request byte is read (:class:`~.base.ChildStart`).
"""

from __future__ import annotations

import os
import struct

from . import child, freshpidns
from .base import ChildStart, Jail, Mechanism
from .wire import write_all

RISK = "children fork from the worker, whose memory holds earlier responses' code and results"
# zygote -> worker: b"R" ready (the in-zygote steps in force, and those that report: bit i for
# step i of Jail.in_zygote), b"P"/b"p" pid (in a fresh PID namespace or not), b"S" wait status +
# CPU milliseconds.
MESSAGE = struct.Struct(">cqq")


def start(jail: Jail) -> bool:
    """The serving worker, last: fork the zygote; the worker's ends of its pipes go on the jail."""
    ctl_r, ctl_w = os.pipe()
    status_r, status_w = os.pipe()
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (*jail.channel, ctl_w, status_r, req_w, res_r):
            os.close(fd)
        try:
            _serve(jail, ctl_r, status_w, req_r, res_w)
        except ChildStart:
            raise
        except BaseException:
            pass
        os._exit(1)
    for fd in (ctl_r, status_w, res_w):
        os.close(fd)
    if jail.pidns_fd >= 0:
        os.close(jail.pidns_fd)
    jail.zygote = (pid, ctl_w, status_r, req_w, req_r, res_r)
    return True


def _serve(jail: Jail, ctl: int, status: int, req: int, res: int) -> None:
    """The zygote's loop (never returns; in a child it raises ChildStart)."""
    harness = child.harness(res, req)
    own = child.own_modules()  # before the import allowlist empties sys.modules
    in_force = reported = 0
    for i, (name, step) in enumerate(jail.in_zygote):
        result = step(jail)
        if result is not None:
            jail.report[name] = bool(result)
            reported |= 1 << i
            in_force |= int(bool(result)) << i
    fresh = bool(jail.report.get("freshpidns"))
    write_all(status, MESSAGE.pack(b"R", in_force, reported))
    while True:
        if not os.read(ctl, 1):
            os._exit(0)
        in_fresh = fresh and freshpidns.fresh(jail)
        pid = os.fork()
        if pid == 0:
            raise ChildStart([(jail, req, res, in_fresh, harness, own)])
        write_all(status, MESSAGE.pack(b"P" if in_fresh else b"p", pid, 0))
        # CPU time from os.times(): os.wait4 would import ``resource`` (refused from here on).
        before = os.times()
        _, wait_status = os.waitpid(pid, 0)
        after = os.times()
        cpu = after.children_user + after.children_system - before.children_user - before.children_system
        write_all(status, MESSAGE.pack(b"S", wait_status, int(cpu * 1000)))


MECHANISM = Mechanism("zygote", "zygote", RISK, steps=(start,))
