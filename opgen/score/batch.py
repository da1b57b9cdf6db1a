"""Grade many responses at once: the static path on a pool of grading processes, the rest in the sandbox.

:func:`grade` holds the GIL for all of its parsing and static evaluation, so threads grade at most
one core's worth of responses. :func:`grade_many` hands the batch to a pool of trusted grading
processes (opgen's own code only: model code is parsed there, and compiled as the scorer itself
does, but never run) that grade each response with the static path alone — and a program that
does not compile, which the sandbox answers without a child too; whatever else comes back
unanswered and is graded here, in this process's threads, through the real sandbox as
:func:`grade` always does. Every grade is the one :func:`grade` gives (tests/test_batch.py
compares them): the pool's processes see the sandbox's limits, and a verdict only ever comes from
their own computation.

The pool starts on first use (fresh interpreters, ``python -m opgen.score.batch``: nothing of this
process's threads, locks or ``__main__`` is inherited) and is reused; ``OPGEN_GRADE_PROCESSES``
(or ``processes=``) sets its size, 0 grades everything in this process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from opgen.score import static as S
from opgen.score.grade import grade, row_fields
from opgen.score.sandbox import FairPool, Result, Sandbox, Unit, assemble, compile_units

T = TypeVar("T")

# Below this many responses a batch is graded in this process: shipping it costs more than it saves.
MIN_BATCH = 64
# Responses per message to a grading process: large enough that the round trip is a small share,
# and at most CHUNK_CHARS characters of responses (a response may have up to 1,000,000).
CHUNK = 128
CHUNK_CHARS = 4_000_000
# A grading process that has not answered a chunk by then is killed and replaced (its chunk is
# graded here): its work is bounded (static.WORK_BUDGET per response), so only a fault gets there.
CHUNK_TIMEOUT_S = 30.0
ITEM_TIMEOUT_S = 0.5
# Chunks in a row without a reply after which the pool is given up (an interpreter that cannot
# import opgen, say): every batch is then graded in this process, as with 0 processes.
MAX_FAILURES = 3


@dataclass(frozen=True)
class Item:
    """One response to grade, with the row's fields that :func:`grade` reads."""

    ground_truth: dict | str
    response: str
    answer_format: str = ""
    assistant_prefix: str = ""

    @classmethod
    def of_row(cls, ground_truth: dict | str, response: str, extra_info: Mapping | None) -> Item:
        """The item of a response to a row with this ``extra_info`` (:func:`grade.row_fields`)."""
        return cls(ground_truth, response, *row_fields(extra_info))


class _NeedsSandbox(Exception):
    """The static path declined: the response must run."""


@dataclass(frozen=True)
class _Limits:
    """What the static path reads of a sandbox (``static.applies``), and its answers that need no
    child; running anything raises."""

    timeout_s: float
    memory_mb: int
    max_output: int

    def run_units(self, units: Sequence[Unit]) -> list[Result]:
        """The sandbox's results when no unit needs a child (none compiles: ``syntax`` for every
        call, exactly as ``Sandbox.run_units`` answers without one); else the response must run."""
        failed, sent = compile_units(units)
        if sent:
            raise _NeedsSandbox
        return assemble(units, failed, [])


def default_processes() -> int:
    """``OPGEN_GRADE_PROCESSES`` when set, else one grading process per CPU (at most 8)."""
    raw = os.environ.get("OPGEN_GRADE_PROCESSES", "")
    if raw.strip():
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"OPGEN_GRADE_PROCESSES must be a whole number, got {raw!r}") from None
        if n < 0:
            raise ValueError(f"OPGEN_GRADE_PROCESSES must be >= 0, got {n}")
        return n
    return min(8, os.cpu_count() or 1)


def _warm() -> None:
    """Fill a grading process's caches before its first chunk: grade, for every operator, its own
    canonical RA answer (the library's parses, compiled bodies and recall verdicts)."""
    from opgen import expr as E
    from opgen import formats as F
    from opgen import ops

    limits = _Limits(2.0, 512, 100_000)
    for op in ops.OPERATORS:
        params = tuple(p.lo if p.kind == "int" else p.choices[0] if p.kind == "choice" else "ab" for p in op.params)
        tree = E.call(op.id, *[E.Var()] * op.n_inputs, params=params)
        code = op.source + "\n" + E.render_program(tree)
        answer = f"{F.recall_block(op.id)}\n{F.ASSEMBLE_HEADER}\n```python\n{code}\n```"
        gt = {"tasks": [{"entry": "main_solution", "expr": E.render(tree), "input": "abc", "output": "",
                         "ops": [op.id], "depth": 1}]}
        with contextlib.suppress(Exception):
            grade(gt, answer, sandbox=limits)  # type: ignore[arg-type]


def _static_chunk(items: list[Item], limits: _Limits, options: dict) -> list[dict | None]:
    """Runs in a grading process: each item's grade, or None where it needs the sandbox (or
    raised: the caller then grades it itself, and raises the same error there)."""
    out: list[dict | None] = []
    for item in items:
        try:
            out.append(grade(item.ground_truth, item.response, sandbox=limits,  # type: ignore[arg-type]
                             answer_format=item.answer_format, assistant_prefix=item.assistant_prefix, **options))
        except Exception:  # _NeedsSandbox, or an error the caller's own grade() will raise
            out.append(None)
    return out


class _Grader:
    """One grading process (``python -m opgen.score.batch``), serving one chunk at a time over its
    pipes: length-prefixed pickles both ways, between two processes that run opgen's code only."""

    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # opgen importable as this process has it
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "opgen.score.batch"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, payload: tuple, timeout_s: float) -> list[dict | None]:
        """The grades of one chunk; raises when the process stopped, or gave no reply within
        ``timeout_s`` (far beyond what its bounded work takes: only a fault gets there)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        _send(self.proc.stdin, payload)
        deadline = time.monotonic() + timeout_s
        (n,) = struct.unpack("<Q", self._read(8, deadline))
        got = pickle.loads(self._read(n, deadline))
        if not isinstance(got, list) or len(got) != len(payload[0]):
            raise EOFError("the grading process gave no reply")
        return got

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd, parts, left = self.proc.stdout.fileno(), [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("the grading process gave no reply in time")
            part = os.read(fd, min(left, 1 << 20))
            if not part:
                raise EOFError("the grading process stopped")
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _send(stream: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> object:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def _serve() -> None:
    """The grading process's loop: chunks in on stdin, grades out on stdout, until stdin closes."""
    # The replies go to a copy of the stdout pipe; anything else written to stdout goes to stderr.
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _warm()
    stdin = sys.stdin.buffer
    while True:
        request = _receive(stdin)
        if request is None:
            return
        assert isinstance(request, tuple)
        items: list[Item] = request[0]
        limits: _Limits = request[1]
        options: dict = request[2]
        _send(stdout, _static_chunk(items, limits, options))


class _Pool:
    """The process's grading processes, started on first use, handed out first come first served
    (the sandbox's :class:`FairPool`)."""

    def __init__(self, size: int) -> None:
        self.size, self.pid = size, os.getpid()
        self.graders = [_Grader() for _ in range(size)]  # every one, busy or idle
        self.free: FairPool[_Grader] = FairPool()
        self.failures = 0  # failed chunks in a row: at MAX_FAILURES the pool is not used again
        for g in self.graders:
            self.free.put(g)

    @property
    def broken(self) -> bool:
        return self.failures >= MAX_FAILURES

    def call(self, payload: tuple) -> list[dict | None] | None:
        """A chunk's grades from the next free grading process; None when that process failed
        (it is replaced: the caller grades the chunk itself)."""
        grader = self.free.get()
        try:
            if self.broken:
                return None
            got = grader.call(payload, CHUNK_TIMEOUT_S + ITEM_TIMEOUT_S * len(payload[0]))
            self.failures = 0
            return got
        except Exception:  # died, hung, or wrote what is not a reply
            grader.kill()
            replacement = _Grader()
            self.graders[self.graders.index(grader)] = replacement
            grader = replacement
            self.failures += 1
            if self.broken:
                warnings.warn(f"opgen.score.batch: {MAX_FAILURES} chunks in a row got no reply from the grading "
                              f"processes ({sys.executable} -m opgen.score.batch); grading in this process from "
                              "now on", RuntimeWarning, stacklevel=2)
            return None
        finally:
            self.free.put(grader)

    def close(self) -> None:
        for g in self.graders:
            g.close()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _grading_pool(processes: int) -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.size != processes or _pool.pid != os.getpid():
            if _pool is not None and _pool.pid == os.getpid():
                _pool.close()
            _pool = _Pool(processes)
            atexit.register(_pool.close)
        return _pool


def pool_pids() -> list[int]:
    """The process ids of the grading processes now running (for measurements)."""
    with _pool_lock:
        return [g.proc.pid for g in _pool.graders] if _pool is not None else []


def close_pool() -> None:
    """Stop the grading processes (they start again on the next batch)."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool.pid == os.getpid():
            _pool.close()
        _pool = None


def _chunks(items: Sequence[Item], size: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive chunks of at most ``size`` items and CHUNK_CHARS characters."""
    out, start, chars = [], 0, 0
    for i, item in enumerate(items):
        n = len(item.response) if isinstance(item.response, str) else 0
        if i > start and (i - start >= size or chars + n > CHUNK_CHARS):
            out.append((start, i))
            start, chars = i, 0
        chars += n
    if start < len(items):
        out.append((start, len(items)))
    return out


def grade_many(items: Sequence[Item], *, sandbox: Sandbox, processes: int | None = None, static: bool = True,
               own: Callable[[int], T] | None = None, answered: Callable[[int, dict], T] | None = None,
               **options: object) -> list[T]:
    """:func:`grade` of every item, in order, with ``sandbox`` and ``options`` (policy, group, mode,
    diagnose, namespace): the static path's share on ``processes`` grading processes (default
    :func:`default_processes`), the rest from ``2 x sandbox.workers`` threads here, each begun as
    soon as its chunk comes back. ``own(i)`` grades item ``i`` here instead of :func:`grade` (and
    ``answered(i, grade)`` turns a pool's grade into the same kind of value): the verl entry point
    returns its own dicts."""
    n_proc = default_processes() if processes is None else int(processes)
    options = dict(options, static=static)
    done: list = [None] * len(items)

    def one(i: int) -> None:
        if own is not None:
            done[i] = own(i)
            return
        item = items[i]
        done[i] = grade(item.ground_truth, item.response, sandbox=sandbox, answer_format=item.answer_format,
                        assistant_prefix=item.assistant_prefix, **options)  # type: ignore[arg-type]

    with ThreadPoolExecutor(max(1, 2 * sandbox.workers)) as threads:
        # Only where the static path applies (static.applies: the sandbox's limits leave room).
        use = static and n_proc > 0 and len(items) >= MIN_BATCH and S.applies(sandbox)
        pool = _grading_pool(n_proc) if use else None
        if pool is None or pool.broken:
            list(threads.map(one, range(len(items))))
            return done
        limits = _Limits(sandbox.timeout_s, sandbox.memory_mb, sandbox.max_output)
        size = max(16, min(CHUNK, -(-len(items) // (4 * n_proc))))
        running: list[Future] = []
        # The sandbox's share starts as soon as a chunk comes back, beside the chunks still out.
        with ThreadPoolExecutor(n_proc) as senders:
            calls = {senders.submit(pool.call, (list(items[a:b]), limits, options)): (a, b)
                     for a, b in _chunks(items, size)}
            for fut in as_completed(calls):
                start, end = calls[fut]
                got = fut.result() or [None] * (end - start)
                for k, g in enumerate(got):
                    if g is None:
                        running.append(threads.submit(one, start + k))
                    else:
                        done[start + k] = g if answered is None else answered(start + k, g)
        for f in running:
            f.result()  # an error grade() raised for a response is raised here, as grade() would
    return done


if __name__ == "__main__":
    _serve()
