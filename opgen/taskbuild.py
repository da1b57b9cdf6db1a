"""Rows of a recipe's split, built in a worker process under a deadline (what ``opgen serve`` serves).

The server never builds in its own process: a build's cost is set by the request (rows, depths,
options no draw can satisfy), so each one runs in a worker (``python -m opgen.taskbuild``, started
on first use and kept) that is killed when it passes its deadline, or when the server stops. The
request then gets :class:`BuildRefused` (a 4xx), the server keeps answering everything else, and
the next build starts a fresh worker. The worker runs :func:`opgen.create_dataset` (the rows of
``opgen build RECIPE --only SPLIT --seed SEED --limit SIZE``) and sends each row as one line of
JSON; the caller keeps those bytes (what it serves, and what its cache is charged).

Wire: one JSON line in (``{"recipe", "split", "seed", "size"}``), then one header line out
(``{"ok": true, "rows": K}`` or ``{"ok": false, "status", "error"}``) and K row lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, NoReturn

from opgen.errors import OpgenError

#: Address space of the worker process.
WORKER_MEMORY_MB = 4096


class BuildRefused(ValueError, OpgenError):
    """A build the server will not finish: a recipe or options that cannot be built (422), one over
    its deadline (413), or no room in the queue (503). ``status``: the HTTP status."""

    exit_code = 1

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Builder:
    """One worker process, one build at a time; at most ``max_waiting`` builds wait their turn."""

    def __init__(self, timeout_s: float = 60.0, max_waiting: int = 16):
        self.timeout_s = float(timeout_s)
        self.max_waiting = int(max_waiting)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._waiting = 0
        self._count = threading.Lock()
        self._closed = False
        self.killed = 0  # workers killed at their deadline (a metric)

    def rows(self, recipe: dict, split: str, seed: int, size: int) -> list[bytes]:
        """Rows ``[0, size)`` of ``split`` as JSON bytes, one per row (BuildRefused when they cannot be had)."""
        with self._count:
            if self._waiting >= self.max_waiting:
                raise BuildRefused(503, f"{self._waiting} builds are waiting; try again later")
            self._waiting += 1
        try:
            with self._lock:
                if self._closed:
                    raise BuildRefused(503, "the server is stopping")
                return self._build({"recipe": recipe, "split": split, "seed": seed, "size": size})
        finally:
            with self._count:
                self._waiting -= 1

    def start(self) -> None:
        """Start the worker now (a server does at start: the first build then waits for no interpreter)."""
        with self._lock:
            self._worker()

    def _worker(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-m", "opgen.taskbuild"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        return self._proc

    def _build(self, request: dict) -> list[bytes]:
        proc = self._worker()
        assert proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            self._kill()
            raise BuildRefused(503, "the build worker stopped; try again") from None
        reader = _Lines(proc.stdout.fileno())
        head = reader.line(deadline, lambda: self._closed)
        if head is None:
            self._expired()
        header = json.loads(head)
        if not header.get("ok"):
            raise BuildRefused(int(header.get("status", 422)), str(header.get("error")))
        out: list[bytes] = []
        for _ in range(int(header["rows"])):
            line = reader.line(deadline, lambda: self._closed)
            if line is None:
                self._expired()
            out.append(line)
        return out

    def _expired(self) -> NoReturn:
        self._kill()
        if self._closed:
            raise BuildRefused(503, "the server is stopping")
        self.killed += 1
        raise BuildRefused(413, f"the build did not finish within {self.timeout_s:g} s (the server's "
                                "--tasks-timeout): ask for fewer rows, a smaller offset or easier options")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def close(self) -> None:
        """Stop the worker now (a build in progress is refused with 503)."""
        self._closed = True
        self._kill()


class _Lines:
    """Lines read from a pipe with a deadline (select, no thread)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray()

    def line(self, deadline: float, stop: Any) -> bytes | None:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                out = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return out
            left = deadline - time.monotonic()
            if left <= 0 or stop():
                return None
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:  # the worker died
                    return None
                self.buf += chunk


# ---------------------------------------------------------------- the worker's side


def _answer(request: dict) -> tuple[dict, list[dict]]:
    from opgen import api
    from opgen.build import BuildError
    from opgen.recipe import RecipeError

    try:
        with warnings.catch_warnings():  # fewer rows than asked: the answer's "rows" says how many
            warnings.simplefilter("ignore", api.FewerRows)
            ds = api.create_dataset(request["recipe"], request["split"], size=request["size"], seed=request["seed"])
    except (RecipeError, BuildError, ValueError, KeyError, TypeError, RecursionError) as exc:
        what = str(exc).strip("'\"") if isinstance(exc, KeyError) else str(exc)
        return {"ok": False, "status": 422, "error": what}, []
    except MemoryError:
        return {"ok": False, "status": 413, "error": f"the build needs more than {WORKER_MEMORY_MB} MiB"}, []
    rows = ds.to_pylist()
    return {"ok": True, "rows": len(rows)}, rows


def _serve() -> None:
    with contextlib.suppress(ValueError, OSError):
        limit = WORKER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else written to stdout goes to stderr, never into the rows
    import opgen.api
    import opgen.build  # noqa: F401
    for raw in sys.stdin.buffer:
        try:
            header, rows = _answer(json.loads(raw))
        except Exception as exc:  # a fault of the builder's: said, and the worker goes on
            header, rows = {"ok": False, "status": 500, "error": f"internal error: {type(exc).__name__}: {exc}"}, []
        out.write(json.dumps(header).encode() + b"\n")
        for row in rows:
            out.write(json.dumps(row).encode() + b"\n")  # ASCII: a row is always one line
        out.flush()


if __name__ == "__main__":
    _serve()
