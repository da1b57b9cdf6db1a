"""Grade responses in grading processes: the only place model text is parsed, compiled or statically evaluated.

The trusted process (the one that calls :func:`grade`, ``compute_score*``, ``score_files``) never
reads a response's text beyond its length: every response — one :func:`grade` call or a batch of
20,000 — goes to a pool of grading processes (``python -m opgen.score.batch``: fresh interpreters
running opgen's own code, which parse and compile model text but never run it). Each response is
graded there under its own budget (:data:`RESPONSE_CPU_S` of CPU, :data:`RESPONSE_WALL_S` of wall
clock), enforced by this process from the outside (each reply carries the grading process's CPU time,
the next response's starting mark; /proc is read only for a reply that is late): a response that
overruns is graded ``timeout``,
one that kills its grading process (a C stack overflow in the compiler) ``killed``; the process is
killed and replaced and the rest of its chunk goes on in the replacement, so one response costs its
neighbours at most its own budget.

A response the static path cannot prove comes back as the request its program needs (the sandbox
units, compiled in the grading process, :func:`opgen.score.sandbox.compile_units`); this process sends
it to the sandbox's workers as bytes and hands the results to a grading process, which finishes the
grade (recall verdicts, structure) exactly as :func:`opgen.score.grade.grade_in_process` does with a real
sandbox (tests/test_batch.py compares them). Messages both ways are ``marshal`` payloads of plain
values (no pickle: nothing a grading process sends can run code here).

The pool starts on first use, one process at a time as work needs them (a single :func:`grade`
starts one), up to ``OPGEN_GRADE_PROCESSES`` (or ``processes=``; default one per CPU, at most 8).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import marshal
import os
import resource
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import opgen.score.grade  # noqa: F401 - read through sys.modules in grade_many
from opgen.library import OperatorLibrary
from opgen.score.sandbox import FairPool, Result, Sandbox, SandboxError, Unit, assemble, compile_units
from opgen.score.settings import DEFAULT, GradeSettings

T = TypeVar("T")

# Responses per message to a grading process, and at most CHUNK_CHARS characters of responses.
CHUNK = 128
CHUNK_CHARS = 4_000_000
# Each response's budget in a grading process (parsing, compiling, the structure walk, the static
# evaluation): far beyond an honest answer's milliseconds. CPU is what is budgeted; the wall clock
# bounds a process that is starved or stopped (a loaded machine gets that much slack).
RESPONSE_CPU_S = 2.0
RESPONSE_WALL_S = 20.0
# How long a new grading process may take to start (import opgen, fill its caches) before the pool
# reports that grading processes cannot start here.
START_TIMEOUT_S = 120.0
# A grading process's own limits: address space, and a worker thread stack deep enough for the
# compiler's recursion under the process's recursion limit (it never runs model code).
GRADER_MEMORY_MB = 4096
GRADER_STACK_MB = 256
GRADER_RECURSION = 4_000
# Rounds of sandbox runs for one response (a recall verdict cached in one grading process but not
# in another changes which probes run: each round runs the units not run yet).
MAX_ROUNDS = 8
_HELLO = "opgen-grader-ready"


class GradingError(SandboxError):
    """The grading processes cannot start here (never a verdict on a response)."""


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
        from opgen.score.grade import row_fields

        return cls(ground_truth, response, *row_fields(extra_info))


def default_processes() -> int:
    """``OPGEN_GRADE_PROCESSES`` when set, else one grading process per CPU (at most 8)."""
    raw = os.environ.get("OPGEN_GRADE_PROCESSES", "")
    if raw.strip():
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"OPGEN_GRADE_PROCESSES must be a whole number, got {raw!r}") from None
        if n < 1:
            raise ValueError(f"OPGEN_GRADE_PROCESSES must be >= 1 (responses are graded only in grading "
                             f"processes), got {n}")
        return n
    return min(8, os.cpu_count() or 1)


# ---------------------------------------------------------------- the grading process's side


class _NeedsSandbox(Exception):
    """The response's program must run: the sandbox request's units, and each unit's key."""

    def __init__(self, sent: list, keys: list[str]):
        super().__init__()
        self.sent, self.keys = sent, keys


def _unit_key(u: Unit) -> str:
    # repr, not marshal: marshal's output depends on reference counts, which differ between processes.
    text = repr((u.code, [(e, tuple(a)) for e, a in u.calls], u.fail_fast, tuple(u.imports)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _Limits:
    """What the static path reads of a sandbox (``static.applies``); running asks this process's
    caller for the sandbox's results (``ran``: the results of units already run, by unit key).

    Which units a response needs can differ between two grading processes (a recall verdict one of
    them has cached needs no probes): a unit not yet run is asked for, with the others kept."""

    timeout_s: float
    memory_mb: int
    max_output: int
    ran: dict | None = None

    def run_units(self, units: Sequence[Unit]) -> list[Result]:
        ran = self.ran or {}
        # A unit already run compiled then (it was sent): only the others are compiled again.
        keys = {i: _unit_key(u) for i, u in enumerate(units) if u.calls}
        rest = [i for i, key in keys.items() if key not in ran]
        failed_rest, sent = compile_units([units[i] for i in rest])
        failed = {rest[k]: r for k, r in failed_rest.items()}
        if sent:
            sent_keys = [keys[i] for k, i in enumerate(rest) if k not in failed_rest]
            raise _NeedsSandbox(sent, sent_keys)
        raw = [Result(*r) for i, key in keys.items() if i not in failed for r in ran[key]]
        return assemble(units, failed, raw)


def _warm() -> None:
    """Fill a grading process's caches before its first response: grade, for every operator, its
    own canonical RA answer (the library's parses, compiled bodies and recall verdicts)."""
    from opgen import expr as E
    from opgen import formats as F
    from opgen import ops
    from opgen.score.grade import grade_in_process

    limits = _Limits(2.0, 512, 100_000)
    for op in ops.OPERATORS:
        params = tuple(p.lo if p.kind == "int" else p.choices[0] if p.kind == "choice" else "ab" for p in op.params)
        tree = E.call(op.id, *[E.Var()] * op.n_inputs, params=params)
        code = op.source + "\n" + E.render_program(tree)
        answer = f"{F.recall_block(op.id)}\n{F.ASSEMBLE_HEADER}\n```python\n{code}\n```"
        gt = {"tasks": [{"entry": "main_solution", "expr": E.render(tree), "input": "abc", "output": "",
                         "ops": [op.id], "depth": 1}]}
        with contextlib.suppress(Exception):
            grade_in_process(gt, answer, sandbox=limits)  # type: ignore[arg-type]


def _grade_task(task: tuple, limits: tuple, settings: GradeSettings) -> tuple:
    """One response's outcome in a grading process: ``("grade", dict)``, ``("run", sent, keys)`` when
    its program must run, or ``("failed", text)`` when grading it raised (a scorer fault)."""
    from opgen.score.grade import grade_in_process

    try:
        ground_truth, response, answer_format, assistant_prefix, structured, ran = task
        box = _Limits(limits[0], limits[1], limits[2], ran=ran)
        return ("grade", grade_in_process(ground_truth, response, settings=settings,
                                          sandbox=box,  # type: ignore[arg-type]
                                          answer_format=answer_format, assistant_prefix=assistant_prefix,
                                          format_structured=structured))
    except _NeedsSandbox as need:
        return ("run", need.sent, need.keys)
    except BaseException as exc:  # the response gets a grade, the process goes on
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return ("failed", f"{type(exc).__name__}: {str(exc)[:300]}")


def _write(fd: int, obj: Any) -> None:
    data = marshal.dumps(obj)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(stream, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def _serve_loop(out_fd: int) -> None:
    stdin = sys.stdin.buffer
    _warm()
    _write(out_fd, (time.process_time(), _HELLO))
    while True:
        head = _read_exact(stdin, 8)
        if head is None:
            return
        body = _read_exact(stdin, struct.unpack("<Q", head)[0])
        if body is None:
            return
        tasks, limits, wire = marshal.loads(body)
        fault: tuple[str, str] | None = None
        try:
            settings = GradeSettings.from_wire(wire)  # the chunk's, read once
        except Exception as exc:  # a scorer fault: every response of the chunk reports it
            fault = ("failed", f"{type(exc).__name__}: {str(exc)[:300]}")
        for task in tasks:  # one reply per response, as soon as it is graded, with this process's CPU
            # time so far (the next response's starting mark)
            outcome = fault if fault is not None else _grade_task(task, limits, settings)
            _write(out_fd, (time.process_time(), outcome))


def _serve() -> None:
    """The grading process: chunks in on stdin, one reply per response out on stdout."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # anything else written to stdout goes to stderr
    with contextlib.suppress(ValueError, OSError):
        limit = GRADER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Set once, for the process's whole life: no response changes it (static.py keeps its
    # recursion below it; the compiler's deeper nesting fails as RecursionError, left to the child).
    sys.setrecursionlimit(GRADER_RECURSION)
    threading.stack_size(GRADER_STACK_MB << 20)
    worker = threading.Thread(target=_serve_loop, args=(out_fd,), name="opgen-grader")
    worker.start()
    worker.join()


# ---------------------------------------------------------------- the trusted side


# Bytes per read of a grading process's replies: a pipe's capacity. (os.read allocates what it is
# asked for: a 1 MB read cost ~50 us per reply, 20 times a 64 KB one.)
_READ = 1 << 16
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Overrun(Exception):
    """The response in progress overran its budget, or its grading process died."""

    def __init__(self, error: str, detail: str):
        super().__init__(detail)
        self.error, self.detail = error, detail


class _Grader:
    """One grading process, serving one chunk at a time over its pipes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # opgen importable as this process has it
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "opgen.score.batch"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise GradingError(f"cannot start a grading process ({sys.executable} -m opgen.score.batch): "
                               f"{exc}") from None
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.buf = bytearray()
        # The process's CPU seconds when it wrote its last message, and when that message arrived.
        self.mark, self.arrived = 0.0, time.monotonic()
        try:
            hello = self._message(START_TIMEOUT_S, None)
        except _Overrun:
            hello = None
        if hello != _HELLO:
            self.kill()
            raise GradingError(f"a grading process ({sys.executable} -m opgen.score.batch) did not start "
                               f"within {START_TIMEOUT_S:g} s; responses are graded only there")

    def cpu_s(self) -> float | None:
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICK
        except (OSError, IndexError, ValueError):
            return None

    def _message(self, wall_s: float, cpu_s: float | None) -> object:
        """The next message's payload, within ``wall_s`` seconds and (where measurable) ``cpu_s``
        seconds of the process's CPU; raises :class:`_Overrun` otherwise.

        Each message carries the grading process's CPU time when it was written (its
        ``time.process_time()``: all of its threads), so the response in progress started at
        ``self.mark``; /proc is read only when the reply is late enough to have overrun: CPU spent
        since the mark is at most the wall clock since the previous message arrived here (plus the
        moment it sat in the pipe), so the first check is due ``cpu_s`` after that arrival."""
        start = time.monotonic()
        check = self.arrived + cpu_s if cpu_s is not None else None
        while True:
            if len(self.buf) >= 8:
                (n,) = struct.unpack_from("<Q", self.buf)
                if len(self.buf) >= 8 + n:
                    data = bytes(self.buf[8:8 + n])
                    del self.buf[:8 + n]
                    try:
                        mark, payload = marshal.loads(data)
                        self.mark = float(mark)
                    except (ValueError, EOFError, TypeError):
                        raise _Overrun("killed", "the grading process sent a malformed reply") from None
                    return payload
            now = time.monotonic()
            wait = start + wall_s - now
            if wait <= 0:
                raise _Overrun("timeout", f"grading this response took more than {wall_s:g} s of wall clock")
            if check is not None and cpu_s is not None:
                if now >= check:
                    used = self.cpu_s()
                    if used is None:  # not measurable here: the wall clock alone bounds it
                        check = None
                    else:
                        spent = used - self.mark
                        if spent > cpu_s:
                            raise _Overrun("timeout", f"grading this response took more than {cpu_s:g} s of CPU")
                        check = now + max(cpu_s - spent, 0.02)
                if check is not None:
                    wait = min(wait, max(check - now, 0.0))
            if select.select([self.fd], [], [], wait)[0]:
                part = os.read(self.fd, _READ)
                if not part:
                    code = self.proc.wait()
                    how = f"signal {-code}" if code < 0 else f"exit code {code}"
                    raise _Overrun("killed", f"grading this response killed its grading process ({how})")
                self.buf += part
                self.arrived = time.monotonic()

    def serve(self, tasks: list, limits: tuple, wire: dict) -> tuple[list[tuple], _Overrun | None]:
        """The replies to ``tasks`` in order, up to the first response that overran (its failure
        is returned beside them; this process is then dead and must be replaced)."""
        assert self.proc.stdin is not None
        try:
            data = marshal.dumps((tasks, limits, wire))
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
            self.arrived = time.monotonic()  # idle since its last message: its CPU since then is this chunk's
        except (OSError, ValueError) as exc:
            return [], _Overrun("killed", f"the grading process stopped: {exc}")
        replies: list[tuple] = []
        for _ in tasks:
            try:
                got = self._message(RESPONSE_WALL_S, RESPONSE_CPU_S)
            except _Overrun as over:
                return replies, over
            if not (isinstance(got, tuple) and got and got[0] in ("grade", "run", "failed")):
                return replies, _Overrun("killed", "the grading process sent a malformed reply")
            replies.append(got)
        return replies, None

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


class _Pool:
    """The process's grading processes, started as work needs them (up to ``size``), handed out
    first come first served (the sandbox's :class:`FairPool`)."""

    def __init__(self, size: int) -> None:
        self.size, self.pid = size, os.getpid()
        self.graders: list[_Grader] = []
        self.free: FairPool[_Grader] = FairPool()
        self.lock = threading.Lock()
        self.started = 0  # graders started or starting

    def _get(self) -> _Grader:
        with self.lock:
            grow = self.started < self.size and not self.free.has_idle()
            if grow:
                self.started += 1
        if grow:
            try:
                g = _Grader()
            except BaseException:
                with self.lock:
                    self.started -= 1
                raise
            with self.lock:
                self.graders.append(g)
            return g
        return self.free.get()

    def serve(self, tasks: list, limits: tuple, wire: dict) -> list[tuple]:
        """One outcome per task, in order: a grading process's reply, or ``("over", error, detail)``
        for a response that overran its budget or killed its process (which is then replaced, and
        the chunk's later responses go to the replacement)."""
        out: list[tuple] = []
        while len(out) < len(tasks):
            grader = self._get()
            replies, over = grader.serve(tasks[len(out):], limits, wire)
            out.extend(replies)
            if over is not None:
                grader.kill()
                with self.lock:
                    self.graders.remove(grader)
                    self.started -= 1
                if len(out) < len(tasks):
                    out.append(("over", over.error, over.detail))
            else:
                self.free.put(grader)
        return out

    def close(self) -> None:
        with self.lock:
            graders, self.graders = self.graders, []
        for g in graders:
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
        return [g.proc.pid for g in list(_pool.graders)] if _pool is not None else []


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


_DEFAULT_LIMITS = (2.0, 512, 100_000)  # forward rows: no sandbox, nothing runs


def _plain(value: object) -> object:
    if hasattr(value, "tolist"):  # numpy values, from a dataframe's row
        return value.tolist()
    raise TypeError(f"ground_truth holds a {type(value).__name__}, not a JSON value")


def _plain_truth(ground_truth: object) -> str:
    """The ground truth as the JSON text a grading process reads (a string as it is)."""
    if isinstance(ground_truth, str):
        return ground_truth
    return json.dumps(ground_truth, default=_plain)


class _Batch:
    """One :func:`grade_many` call: the items, their grades so far, and the way to each grade."""

    def __init__(self, items: Sequence[Item], sandbox: Sandbox | None, pool: _Pool, settings: GradeSettings,
                 answered: Callable[[int, dict], object] | None):
        G = sys.modules["opgen.score.grade"]  # (``opgen.score.grade`` the attribute is the function)
        self.G, self.items, self.sandbox, self.pool = G, items, sandbox, pool
        self.wire = settings.to_wire()  # what each message to a grading process carries
        self.answered, self.mode = answered, settings.mode
        self.limits = _DEFAULT_LIMITS if sandbox is None else (sandbox.timeout_s, sandbox.memory_mb,
                                                               sandbox.max_output)
        self.texts = [G.response_text(item.response) for item in items]
        # The ground truths are the caller's data, checked (and raised about) here, before any
        # grading; each is kept for a grade made here (too_large, timeout, killed) only where needed.
        self.truths: dict[int, object] = {}
        formats: dict[str, bool | None] = {}
        for i, item in enumerate(items):
            truth = G.load_truth(item.ground_truth)
            if len(self.texts[i]) > G.MAX_RESPONSE_CHARS:
                self.truths[i] = truth
            af = str(item.answer_format)
            if af and af not in formats:
                formats[af] = self._format_fact(af)
            if af and formats[af] is None and not truth.native and \
                    (truth.mode if self.mode == "auto" else self.mode) == "program":
                from opgen import formats as F

                F.answer_spec(af)  # raises FormatError naming the unknown format, as grading would
        self.formats = formats
        self.done: list = [None] * len(items)
        self.runners: ThreadPoolExecutor | None = None  # made when a program must first run
        self.inline = False

    def finish(self, i: int, g: dict) -> None:
        self.done[i] = g if self.answered is None else self.answered(i, g)

    def truth(self, i: int) -> object:
        if i not in self.truths:
            self.truths[i] = self.G.load_truth(self.items[i].ground_truth)
        return self.truths[i]

    def fail(self, i: int, error: str, detail: str) -> None:
        self.finish(i, self.G.failure(self.truth(i), self.mode, error, detail))

    def task(self, i: int, ran: dict | None = None) -> tuple:
        item = self.items[i]
        return (_plain_truth(item.ground_truth), self.texts[i], str(item.answer_format),
                str(item.assistant_prefix), self.structured(str(item.answer_format)), ran)

    def structured(self, answer_format: str) -> bool | None:
        return self.formats.get(answer_format)

    @staticmethod
    def _format_fact(answer_format: str) -> bool | None:
        """The format's ``structured`` fact, from this process's registry (formats registered at
        run time exist here only); None when unknown here."""
        from opgen import formats as F

        try:
            return F.answer_spec(answer_format).structured
        except F.FormatError:
            return None

    def serve(self, indices: list[int]) -> list[tuple]:
        return self.pool.serve([self.task(i) for i in indices], self.limits, self.wire)

    def settle(self, i: int, outcome: tuple) -> Future | None:
        """Record a grading process's outcome for item ``i``; a program to run is started (its
        future returned)."""
        kind = outcome[0]
        if kind == "grade":
            self.finish(i, outcome[1])
        elif kind == "over":
            self.fail(i, outcome[1], outcome[2])
        elif kind == "failed":
            self.fail(i, "killed", "grading this response failed: " + str(outcome[1]))
        elif self.sandbox is None:
            self.fail(i, "killed", "the response's program needs a sandbox; none was given")
        elif self.inline:  # one response (a grade() call): run it here, no thread to start
            self.run(i, outcome)
        else:  # called from grade()'s thread only: the pool is made once, when first needed
            if self.runners is None:  # two requests per sandbox worker at a time
                self.runners = ThreadPoolExecutor(2 * self.sandbox.workers)
            return self.runners.submit(self.run, i, outcome)
        return None

    def run(self, i: int, outcome: tuple) -> None:
        """Run what item ``i``'s program needs in the sandbox, then have it graded with the results."""
        assert self.sandbox is not None
        ran: dict[str, list] = {}
        for _ in range(MAX_ROUNDS):
            _, sent, keys = outcome
            raw = [(r.status, r.value, r.detail) for r in self.sandbox.run_sent(sent)]
            position = 0
            for (_, calls, _), key in zip(sent, keys):
                ran[key] = raw[position:position + len(calls)]
                position += len(calls)
            (outcome,) = self.pool.serve([self.task(i, ran)], self.limits, self.wire)
            if outcome[0] != "run":
                self.settle(i, outcome)
                return
        self.fail(i, "killed", f"the response's program asked for {MAX_ROUNDS} runs")

    def grade(self, n_proc: int) -> list:
        todo: list[int] = []
        for i, text in enumerate(self.texts):
            big = self.G.too_large(self.truths[i], self.mode, text) if i in self.truths else None
            if big is not None:
                self.finish(i, big)
            else:
                todo.append(i)
        if not todo:
            return self.done
        size = max(1, min(CHUNK, -(-len(todo) // (4 * n_proc))))
        spans = [todo[a:b] for a, b in _chunks([self.items[i] for i in todo], size)]
        self.inline = len(todo) == 1
        running: list[Future] = []
        try:
            if len(spans) == 1:
                running += self._settled(spans[0], self.serve(spans[0]))
            else:
                with ThreadPoolExecutor(min(n_proc, len(spans))) as senders:
                    calls = {senders.submit(self.serve, span): span for span in spans}
                    for fut in as_completed(calls):
                        running += self._settled(calls[fut], fut.result())
            for f in running:
                f.result()
        finally:
            if self.runners is not None:
                self.runners.shutdown()
        return self.done

    def _settled(self, span: list[int], outcomes: list[tuple]) -> list[Future]:
        return [f for i, o in zip(span, outcomes) if (f := self.settle(i, o)) is not None]


def grade_many(items: Sequence[Item], *, sandbox: Sandbox | None, settings: GradeSettings = DEFAULT,
               processes: int | None = None, answered: Callable[[int, dict], T] | None = None) -> list[T]:
    """:func:`grade` of every item, in order, with ``sandbox`` and ``settings``: graded on
    ``processes`` grading processes (default
    :func:`default_processes`), the programs that must run sent from here to ``sandbox`` (two
    requests per sandbox worker at a time), each as soon as its grading process asks.
    ``answered(i, grade)`` turns a grade into the value returned (the verl entry point returns its
    own dicts). ``sandbox`` may be None only when no program runs (forward rows)."""
    if not isinstance(settings, GradeSettings):
        raise TypeError(f"settings must be a GradeSettings, got {type(settings).__name__}")
    n_proc = default_processes() if processes is None else int(processes)
    if n_proc < 1:
        raise ValueError(f"processes must be >= 1 (responses are graded only in grading processes), got {n_proc}")
    if not items:
        return []
    batch = _Batch(items, sandbox, _grading_pool(n_proc), settings, answered)
    return batch.grade(n_proc)


def grade(ground_truth: dict | str, response: str | bytes, *, policy: str = "output", group: str = "fraction",
          mode: str = "auto", sandbox: Sandbox | None = None, diagnose: bool = True,
          answer_format: str = "", assistant_prefix: str = "", namespace: str = "strict",
          static: bool = True, settings: GradeSettings | None = None,
          library: OperatorLibrary | str | None = None) -> dict:
    """Grade one response. ``policy``: reward output match only, or output and structure;
    ``group``: a group row's score as the fraction of tasks correct, or 1 only when all are;
    ``mode``: ``auto`` follows the ground truth, ``forward``/``program`` force one (native rows are
    always forward). ``sandbox`` defaults to the process-wide one. ``answer_format`` and
    ``assistant_prefix`` are the row's ``extra_info`` fields of those names. ``namespace``:
    ``strict`` runs programs on their own (as the prompts say); ``native`` binds first what the
    native benchmark's module had imported (:func:`opgen.score.diagnose.native_imports`).
    ``static=False`` runs every program in the sandbox (by default programs of library code only are
    evaluated without running: opgen/score/static.py, the same grades). ``settings``: these options
    as one :class:`opgen.score.settings.GradeSettings` instead (then leave the loose ones alone).
    ``library``: the operator library the row was built from (an ``OperatorLibrary`` or a spec
    ``opgen.library.load`` takes); by default the one the ground truth names, from the user's
    library store (GradeSettings.for_row: UnknownLibrary or LibraryMismatch when it cannot be had).

    Total: whatever the response's text, the result is a grade (``too_large`` over
    :data:`opgen.score.grade.MAX_RESPONSE_CHARS`; ``timeout``/``killed`` when grading it overran its budget or crashed
    a grading process). The text is parsed, compiled and statically evaluated only in a grading
    process (below), never in this one. A bad setting or ground truth (the
    caller's, not the model's) raises ValueError/:class:`GroundTruthError`."""
    G = sys.modules["opgen.score.grade"]
    record = GradeSettings.resolve(settings, policy=policy, group=group, mode=mode, namespace=namespace,
                                   static=static, diagnose=diagnose, library=library).for_row(ground_truth)
    mode = record.mode
    truth = G.load_truth(ground_truth)
    text = G.response_text(response)
    big = G.too_large(truth, mode, text)
    if big is not None:
        return big
    effective = truth.mode if mode == "auto" or truth.native else mode
    box = sandbox
    if box is None and effective == "program":
        from opgen.score.sandbox import shared

        box = shared()
    item = Item(ground_truth, text, answer_format, assistant_prefix)
    return grade_many([item], sandbox=box, settings=record)[0]


if __name__ == "__main__":
    _serve()
