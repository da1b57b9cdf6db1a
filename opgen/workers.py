"""Forked worker processes whose death is a named error, never a hang.

``multiprocessing.Pool`` replaces a worker that dies (``kill -9``, the OOM killer, a segfault) and
loses the task it held: ``map`` then waits forever, and ``terminate`` can hang on the dead worker.
Here each worker holds one task at a time over a pipe of its own, so the supervisor knows which task
a dead worker held: it runs that task once more in a fresh worker, and when that worker dies too,
raises :class:`WorkerDied` naming the task (``describe(arg)``) and how each worker ended. A task must
therefore be safe to run twice (a build's shard rewrites its files from the start).

Workers are forked (they inherit the caller's state: the build's ``Shards``, an operator watch),
die with the supervisor even on SIGKILL (``PR_SET_PDEATHSIG``), ignore SIGINT and take SIGTERM's
default action (``outdir.worker_init``); leaving the pool's block for any reason (an error, a
SIGTERM raised as ``outdir.Terminated`` in the supervisor) kills and reaps them all.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from opgen import opwatch, outdir
from opgen.errors import OpgenError

POLL_S = 0.1  # how often the supervisor calls ``poll`` (a progress bar) while it waits


class _RemoteTraceback(Exception):
    """The traceback in the worker, as the cause of an exception that is not opgen's (a bug)."""


class WorkerDied(RuntimeError, OpgenError):
    """A task's worker process died, and so did the fresh one it was given again."""

    exit_code = 1


def _serve(conn: Connection, parent: int, init: Callable[[], None] | None) -> None:
    outdir.worker_init(parent)
    opwatch.in_child()
    if init is not None:
        init()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        fn, arg = task
        try:
            reply: tuple[bool, Any, str] = (True, fn(arg), "")
        except BaseException as exc:  # every failure goes back to the supervisor
            reply = (False, *_portable(exc))
        conn.send(reply)


def _portable(exc: BaseException) -> tuple[BaseException, str]:
    """``exc`` as it can cross the pipe, and the worker's traceback when it is not opgen's own error
    (a bug); one that cannot be pickled becomes a RuntimeError saying what it was."""
    text = "" if isinstance(exc, OpgenError) else "".join(traceback.format_exception(exc)).rstrip()
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}"), text
    return exc, text


def ended(process: mp.process.BaseProcess) -> str:
    """How a dead worker ended, in words."""
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (" (the OOM killer or kill -9)" if -code == signal.SIGKILL else "")
    if code == opwatch.EXIT_STUCK:
        return f"exit status {code}: an operator ran past its budget and would not stop, as it said above"
    return f"exit status {code}"


class _Worker:
    def __init__(self, ctx: Any, init: Callable[[], None] | None):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, os.getpid(), init), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()
        self.process.join()
        self.conn.close()


class Pool:
    """``n`` forked workers; ``map`` runs tasks on them (see the module's docstring)."""

    def __init__(self, n: int, init: Callable[[], None] | None = None):
        self.ctx = mp.get_context("fork")
        self.init = init
        self.workers: list[_Worker] = []
        try:
            for _ in range(n):
                self.workers.append(_Worker(self.ctx, init))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        self.workers = []

    def map(self, fn: Callable[[Any], Any], args: Sequence[Any], order: Sequence[int] | None = None,
            describe: Callable[[Any], str] = repr, poll: Callable[[], None] | None = None) -> list[Any]:
        """``[fn(a) for a in args]``, handed out in ``order`` (default: as given); results in ``args``'
        order. A task whose worker dies runs once more in a fresh worker; a second death is
        :class:`WorkerDied`. A task's exception is raised here (the other tasks are abandoned)."""
        queue: deque[int] = deque(range(len(args)) if order is None else order)
        deaths: dict[int, str] = {}
        out: list[Any] = [None] * len(args)
        busy: dict[_Worker, int] = {}
        left = len(args)
        while left:
            for w in self.workers:
                if w not in busy and queue:
                    k = queue.popleft()
                    w.conn.send((fn, args[k]))
                    busy[w] = k
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=POLL_S))
            if poll is not None:
                poll()
            for w, k in list(busy.items()):
                if w.conn in ready:
                    try:
                        ok, value, text = w.conn.recv()
                    except (EOFError, OSError):
                        pass  # it died: its sentinel says so
                    else:
                        del busy[w]
                        if not ok:
                            raise value from (_RemoteTraceback(text) if text else None)
                        out[k] = value
                        left -= 1
                        continue
                if w.process.sentinel in ready or w.conn in ready:
                    w.process.join()
                    del busy[w]
                    how = ended(w.process)
                    self._replace(w)
                    if w.process.exitcode == opwatch.EXIT_STUCK:  # it would only do so again
                        raise WorkerDied(f"{describe(args[k])}: its worker process ended itself ({how})")
                    if k in deaths:
                        raise WorkerDied(f"{describe(args[k])}: its worker process died ({deaths[k]}), and so did the "
                                         f"fresh one it was given again ({how})")
                    deaths[k] = how
                    queue.appendleft(k)
        return out

    def _replace(self, dead: _Worker) -> None:
        dead.kill()
        self.workers[self.workers.index(dead)] = _Worker(self.ctx, self.init)
