"""Grade responses in grading processes: the only place model text is parsed, compiled or statically evaluated.

The trusted process (the one that calls :func:`grade`, ``compute_score*``, ``score_files``) never
reads a response's text beyond its length: every response — one :func:`grade` call or a batch of
20,000 — goes to a pool of grading processes (fresh interpreters running opgen's own code, which
parse and compile model text but never run it), started sealed from their caller
(opgen/score/spawn.py: ``python -I``, an explicit minimal environment, ``/`` as their directory, opgen
loaded from this process's own copy and nothing else from there). Each response is graded there
under its own budget (:data:`RESPONSE_CPU_S` of CPU, :data:`RESPONSE_WALL_S` of wall clock),
enforced by this process from the outside (each reply carries the grading process's CPU time, the
next response's starting mark; /proc is read only for a reply that is late): a response that
overruns is graded ``timeout`` and its process replaced, the rest of its chunk going on in the
replacement, so one response costs its neighbours at most its own budget. A grading process that
dies while grading a response (killed from outside, as the OOM killer does, or crashed by it) is not
the response's fault: it is replaced and the response retried once, in a fresh process; only one
whose process dies again is graded ``killed`` (the grade's ``retries`` counts the retry).

A response the static path cannot prove comes back as the request its program needs (the sandbox
units, compiled in the grading process, :func:`opgen.score.sandbox.compile_units`); this process sends
it to the sandbox's workers as bytes and hands the results to a grading process, which finishes the
grade (recall verdicts, structure) exactly as :func:`opgen.score.judge.grade_in_process` does with a
real sandbox (tests/test_batch.py compares them). Messages both ways are the one framing of
``opgen/score`` (opgen/score/jail/wire.py: ``marshal`` payloads of plain values, no pickle: nothing a
grading process sends can run code here), typed records with ``to_wire``/``from_wire``: a
:class:`Chunk` of :class:`Task` in, one outcome per task out (:class:`Graded`, with the grade in its
compact form, :class:`NeedsRun`, :class:`Failed`).

The pool starts on first use, one process at a time as work needs them (a single :func:`grade`
starts one), up to ``OPGEN_GRADE_PROCESSES`` (or ``processes=``; default one per CPU, at most 8).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import resource
import select
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TypeVar

from opgen import expr, faults, ops
from opgen import formats as F
from opgen.library import OperatorLibrary
from opgen.score import judge, spawn
from opgen.score.jail import wire
from opgen.score.sandbox import FairPool, Result, Sandbox, SandboxError, Unit, assemble, compile_units, shared
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
# How long a new grading process may take to become ready (import opgen, fill its caches) when it
# neither dies nor says anything: one that ends first is reported at once, with what it said.
START_TIMEOUT_S = 120.0
# A grading process's own limits: address space, and a worker thread stack deep enough for the
# compiler's recursion under the process's recursion limit (it never runs model code).
GRADER_MEMORY_MB = 4096
GRADER_STACK_MB = 256
GRADER_RECURSION = 4_000
# Rounds of sandbox runs for one response (a recall verdict cached in one grading process but not
# in another changes which probes run: each round runs the units not run yet).
MAX_ROUNDS = 8
_READY = "opgen-grader-ready"
# A grading process: ``python -I -c BOOT <opgen/__init__.py>`` loads the opgen package from that
# file (this process's own copy, editable install or not), never from a path entry, then serves.
BOOT = ("import importlib.util, sys\n"
        "init = sys.argv[1]\n"
        "spec = importlib.util.spec_from_file_location('opgen', init, "
        "submodule_search_locations=[init.rpartition('/')[0]])\n"
        "package = importlib.util.module_from_spec(spec)\n"
        "sys.modules['opgen'] = package\n"
        "spec.loader.exec_module(package)\n"
        "from opgen.score.batch import serve\n"
        "serve()\n")


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
        """The item of a response to a row with this ``extra_info`` (:func:`judge.row_fields`)."""
        return cls(ground_truth, response, *judge.row_fields(extra_info))


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


# ---------------------------------------------------------------- what crosses the boundary


@dataclass(frozen=True)
class Limits:
    """The sandbox's limits the static path reads (``static.applies``): a chunk's, read once."""

    timeout_s: float
    memory_mb: int
    max_output: int

    def to_wire(self) -> tuple:
        return (self.timeout_s, self.memory_mb, self.max_output)

    @classmethod
    def from_wire(cls, wire: tuple) -> Limits:
        timeout_s, memory_mb, max_output = wire
        return cls(float(timeout_s), int(memory_mb), int(max_output))


@dataclass(frozen=True)
class Task:
    """One response as a grading process receives it: the row's ground truth as JSON text, the
    response, the row's answer format and teacher-forced prefix, the format's ``structured`` fact as
    this process resolved it (a grading process does not know formats registered here; None:
    unknown here), and the results of units already run for it (unit key -> raw results; None in
    the first round)."""

    ground_truth: str
    response: str
    answer_format: str
    assistant_prefix: str
    structured: bool | None
    ran: dict | None = None

    def to_wire(self) -> tuple:
        return (self.ground_truth, self.response, self.answer_format, self.assistant_prefix, self.structured,
                self.ran)

    @classmethod
    def from_wire(cls, wire: tuple) -> Task:
        return cls(*wire)


@dataclass(frozen=True)
class Chunk:
    """One message to a grading process: responses graded with one sandbox's limits and one record
    of settings (``GradeSettings.to_wire``; read back, and checked again, there)."""

    tasks: Sequence[Task]
    limits: Limits
    settings: dict

    def to_wire(self) -> tuple:
        return ([t.to_wire() for t in self.tasks], self.limits.to_wire(), self.settings)

    @classmethod
    def from_wire(cls, wire: tuple) -> Chunk:
        tasks, limits, settings = wire
        return cls([Task.from_wire(t) for t in tasks], Limits.from_wire(limits), settings)


@dataclass(frozen=True)
class Graded:
    """A response's grade (on the wire in :func:`opgen.score.judge.grade_to_wire`'s compact form)."""

    grade: dict
    TAG = 0

    def to_wire(self) -> tuple:
        return (self.TAG, judge.grade_to_wire(self.grade))


@dataclass(frozen=True)
class NeedsRun:
    """The response's program must run: the sandbox request's units (as :func:`compile_units` sends
    them) and each unit's key (:func:`_unit_key`)."""

    sent: list
    keys: list
    TAG = 1

    def to_wire(self) -> tuple:
        return (self.TAG, self.sent, self.keys)


@dataclass(frozen=True)
class Failed:
    """Grading the response raised in the grading process (a scorer fault, never the model's): the
    exception's text."""

    text: str
    TAG = 2

    def to_wire(self) -> tuple:
        return (self.TAG, self.text)


@dataclass(frozen=True)
class Over:
    """(This process's own, never on the wire.) The response overran its budget (``timeout``) or
    its grading process died under it, and again on its retry (``killed``)."""

    error: str
    detail: str


Outcome = Graded | NeedsRun | Failed | Over


def outcome_from_wire(wire: object) -> Graded | NeedsRun | Failed:
    """A grading process's outcome; ``ValueError`` for anything else (the process is then lost)."""
    if type(wire) is tuple and wire:
        tag = wire[0]
        if tag == 0 and len(wire) == 2 and type(wire[1]) in (tuple, dict):
            return Graded(judge.grade_from_wire(wire[1]))
        if tag == 1 and len(wire) == 3 and type(wire[1]) is list and type(wire[2]) is list:
            return NeedsRun(wire[1], wire[2])
        if tag == 2 and len(wire) == 2 and type(wire[1]) is str:
            return Failed(wire[1])
    raise ValueError("a malformed outcome")


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
class _Asking:
    """The sandbox a grading process grades with: what the static path reads of one (its limits);
    running asks this process's caller for the sandbox's results (``ran``: the results of units
    already run, by unit key).

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
    box = _Asking(2.0, 512, 100_000)
    for op in ops.OPERATORS:
        params = tuple(p.lo if p.kind == "int" else p.choices[0] if p.kind == "choice" else "ab" for p in op.params)
        tree = expr.call(op.id, *[expr.Var()] * op.n_inputs, params=params)
        code = op.source + "\n" + expr.render_program(tree)
        answer = f"{F.recall_block(op.id)}\n{F.ASSEMBLE_HEADER}\n```python\n{code}\n```"
        gt = {"tasks": [{"entry": "main_solution", "expr": expr.render(tree), "input": "abc", "output": "",
                         "ops": [op.id], "depth": 1}]}
        with contextlib.suppress(Exception):
            judge.grade_in_process(gt, answer, sandbox=box)  # type: ignore[arg-type]


def _grade_task(task: Task, limits: Limits, settings: GradeSettings) -> Graded | NeedsRun | Failed:
    """One response's outcome in a grading process."""
    try:
        box = _Asking(limits.timeout_s, limits.memory_mb, limits.max_output, ran=task.ran)
        return Graded(judge.grade_in_process(task.ground_truth, task.response, settings=settings,
                                             sandbox=box,  # type: ignore[arg-type]
                                             answer_format=task.answer_format,
                                             assistant_prefix=task.assistant_prefix,
                                             format_structured=task.structured))
    except _NeedsSandbox as need:
        return NeedsRun(need.sent, need.keys)
    except BaseException as exc:  # the response gets a grade, the process goes on
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return Failed(f"{type(exc).__name__}: {str(exc)[:300]}")


def _serve_loop(out_fd: int, quiet: int) -> None:
    _warm()
    # Ready: from here on nothing this process writes goes anywhere (before, its stderr told the
    # scorer why a start failed).
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    wire.send(out_fd, (time.process_time(), _READY))
    while True:
        try:
            chunk = wire.receive(0)
        except EOFError:
            return
        tasks, limits, fault_text = [], Limits(2.0, 512, 100_000), None
        try:
            read = Chunk.from_wire(chunk)
            tasks, limits = list(read.tasks), read.limits
            settings = GradeSettings.from_wire(read.settings)  # the chunk's, read once
        except Exception as exc:  # a scorer fault: every response of the chunk reports it
            fault_text = f"{type(exc).__name__}: {str(exc)[:300]}"
            tasks = tasks or list(chunk[0])
        for task in tasks:  # one reply per response, as soon as it is graded, with this process's CPU
            # time so far (the next response's starting mark)
            outcome = Failed(fault_text) if fault_text is not None else _grade_task(task, limits, settings)
            wire.send(out_fd, (time.process_time(), outcome.to_wire()))


def serve() -> None:
    """The grading process (started by :data:`BOOT`): chunks in on stdin, one reply per response
    out on stdout."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # anything else written to stdout goes to stderr (the scorer's, until ready)
    quiet = os.open(os.devnull, os.O_RDWR)
    with contextlib.suppress(ValueError, OSError):
        limit = GRADER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Set once, for the process's whole life: no response changes it (static.py keeps its
    # recursion below it; the compiler's deeper nesting fails as RecursionError, left to the child).
    sys.setrecursionlimit(GRADER_RECURSION)
    threading.stack_size(GRADER_STACK_MB << 20)
    worker = threading.Thread(target=_serve_loop, args=(out_fd, quiet), name="opgen-grader")
    worker.start()
    worker.join()


# ---------------------------------------------------------------- the trusted side


# Bytes per read of a grading process's replies: a pipe's capacity. (os.read allocates what it is
# asked for: a 1 MB read cost ~50 us per reply, 20 times a 64 KB one.)
_READ = 1 << 16
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Overrun(Exception):
    """The response in progress overran its budget (``timeout``), or its grading process died or
    broke the protocol (``killed``)."""

    def __init__(self, error: str, detail: str):
        super().__init__(detail)
        self.error, self.detail = error, detail


# This process's own copy of the opgen package (opgen/__init__.py), which grading processes load.
OPGEN_INIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")


def grader_argv() -> list[str]:
    """How a grading process starts: sealed (``-I``), opgen loaded from this process's own copy."""
    return [sys.executable, "-I", "-c", BOOT, OPGEN_INIT]


class _Grader:
    """One grading process, serving one chunk at a time over its pipes."""

    def __init__(self) -> None:
        what = f"a grading process ({sys.executable} -I, opgen from {os.path.dirname(OPGEN_INIT)})"
        try:
            helper, hello = spawn.start(grader_argv(), what, START_TIMEOUT_S)
        except OSError as exc:
            raise GradingError(f"cannot start {what}: {exc}") from None
        except spawn.StartFailed as exc:
            raise GradingError(f"{exc}\n(responses are graded only in grading processes)") from None
        if not (type(hello) is tuple and len(hello) == 2 and hello[1] == _READY):
            helper.kill()
            raise GradingError(f"{what} sent {str(hello)[:200]!r} instead of its ready message")
        self.helper, self.proc = helper, helper.proc
        self.fd, self.reader = helper.rfd, helper.reader
        # The process's CPU seconds when it wrote its last message, and when that message arrived.
        self.mark, self.arrived = float(hello[0]), time.monotonic()

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
            try:
                got, payload = self.reader.take()
                if got:
                    mark, body = payload
                    self.mark = float(mark)
                    return body
            except (ValueError, TypeError):
                raise _Overrun("killed", "the grading process sent a malformed reply") from None
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
                    how = spawn.how_it_ended(self.proc.wait())
                    raise _Overrun("killed", f"grading this response killed its grading process ({how})")
                self.reader.feed(part)
                self.arrived = time.monotonic()

    def serve(self, chunk: Chunk, serial: int) -> tuple[list[Graded | NeedsRun | Failed], _Overrun | None]:
        """The outcomes of ``chunk``'s tasks in order, up to the first response that overran or
        whose process died (its failure is returned beside them; this process is then dead and must
        be replaced). ``serial``: the chunk's number in the pool (the fault hook's)."""
        # Test-only (OPGEN_FAULT=grading-sent[-N]:SIG, opgen/faults.py): a signal to the process as it
        # is given the chunk (the Nth of the pool, or every one), as the OOM killer would send it:
        # it dies with the chunk's first response in hand, however fast it would have graded it.
        faults.signal_nth("grading-sent", serial, self.proc.pid)
        try:
            wire.write_all(self.helper.wfd, wire.encode(chunk.to_wire()))
            self.arrived = time.monotonic()  # idle since its last message: its CPU since then is this chunk's
        except (OSError, ValueError) as exc:
            return [], _Overrun("killed", f"the grading process had stopped ({exc})")
        replies: list[Graded | NeedsRun | Failed] = []
        for _ in chunk.tasks:
            try:
                replies.append(outcome_from_wire(self._message(RESPONSE_WALL_S, RESPONSE_CPU_S)))
            except _Overrun as over:
                return replies, over
            except ValueError:
                return replies, _Overrun("killed", "the grading process sent a malformed reply")
        return replies, None

    def kill(self) -> None:
        self.helper.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()


class _Pool:
    """The process's grading processes, started as work needs them (up to ``size``), handed out
    first come first served (the sandbox's :class:`FairPool`)."""

    def __init__(self, size: int) -> None:
        self.size, self.pid = size, os.getpid()
        self.graders: list[_Grader] = []
        self.free: FairPool[_Grader] = FairPool()
        self.lock = threading.Lock()
        self.started = 0  # graders started or starting
        self.sent = 0  # chunks sent (the fault hook's count)

    def _get(self, fresh: bool = False) -> _Grader:
        """An idle grading process (a new one while the pool is below its size and none is idle, or
        ``fresh``: a new one where the pool has room); one found dead is dropped, never handed out."""
        while True:
            with self.lock:
                grow = self.started < self.size and (fresh or not self.free.has_idle())
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
            g = self.free.get()
            if g.proc.poll() is None:
                return g
            self._drop(g)  # killed while idle: costs nothing but its replacement

    def _drop(self, grader: _Grader) -> None:
        grader.kill()
        with self.lock:
            self.graders.remove(grader)
            self.started -= 1

    def serve(self, tasks: Sequence[Task], limits: Limits, settings: dict) -> tuple[list[Outcome], list[int]]:
        """One outcome per task, in order, and how many times each was retried (0 or 1).

        A response that overran its budget is :class:`Over` (``timeout``): its process is replaced
        and the chunk's later responses go to the replacement. One whose process died while it was
        in hand (killed from outside, or by the response) is retried once, first of the rest, in a
        fresh process; only one whose process dies again is :class:`Over` (``killed``)."""
        out: list[Outcome] = []
        retries = [0] * len(tasks)
        while len(out) < len(tasks):
            grader = self._get(fresh=retries[len(out)] > 0)
            with self.lock:
                self.sent += 1
                serial = self.sent
            replies, over = grader.serve(Chunk(tasks[len(out):], limits, settings), serial)
            out.extend(replies)
            if over is None:
                self.free.put(grader)
                continue
            self._drop(grader)
            i = len(out)
            if i == len(tasks):
                continue
            if over.error == "killed" and not retries[i]:
                retries[i] = 1  # sent again, first of the rest
            else:
                again = " (and again on its retry in a fresh process)" if retries[i] else ""
                out.append(Over(over.error, over.detail + again))
        return out, retries

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


_DEFAULT_LIMITS = Limits(2.0, 512, 100_000)  # forward rows: no sandbox, nothing runs


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
        self.items, self.sandbox, self.pool = items, sandbox, pool
        self.wire = settings.to_wire()  # what each message to a grading process carries
        self.answered, self.mode = answered, settings.mode
        self.limits = _DEFAULT_LIMITS if sandbox is None else Limits(sandbox.timeout_s, sandbox.memory_mb,
                                                                     sandbox.max_output)
        self.texts = [judge.response_text(item.response) for item in items]
        # The ground truths are the caller's data, checked (and raised about) here, before any
        # grading; each is kept for a grade made here (too_large, timeout, killed) only where needed.
        self.truths: dict[int, judge.Truth] = {}
        formats: dict[str, bool | None] = {}
        for i, item in enumerate(items):
            truth = judge.load_truth(item.ground_truth)
            if len(self.texts[i]) > judge.MAX_RESPONSE_CHARS:
                self.truths[i] = truth
            af = str(item.answer_format)
            if af and af not in formats:
                formats[af] = self._format_fact(af)
            if af and formats[af] is None and not truth.native and \
                    (truth.mode if self.mode == "auto" else self.mode) == "program":
                F.answer_spec(af)  # raises FormatError naming the unknown format, as grading would
        self.formats = formats
        self.done: list = [None] * len(items)
        # Per item, the times its grading was retried because a grading process or sandbox worker
        # died under it (the grade's ``retries``, present only where there was one).
        self.retries: dict[int, int] = {}
        self.runners: ThreadPoolExecutor | None = None  # made when a program must first run
        self.inline = False

    def finish(self, i: int, g: dict) -> None:
        retries = self.retries.get(i)
        if retries:
            g["retries"] = retries
        self.done[i] = g if self.answered is None else self.answered(i, g)

    def retried(self, i: int, n: int) -> None:
        if n:
            self.retries[i] = self.retries.get(i, 0) + n

    def truth(self, i: int) -> judge.Truth:
        if i not in self.truths:
            self.truths[i] = judge.load_truth(self.items[i].ground_truth)
        return self.truths[i]

    def fail(self, i: int, error: str, detail: str) -> None:
        self.finish(i, judge.failure(self.truth(i), self.mode, error, detail))

    def task(self, i: int, ran: dict | None = None) -> Task:
        item = self.items[i]
        return Task(_plain_truth(item.ground_truth), self.texts[i], str(item.answer_format),
                    str(item.assistant_prefix), self.formats.get(str(item.answer_format)), ran)

    @staticmethod
    def _format_fact(answer_format: str) -> bool | None:
        """The format's ``structured`` fact, from this process's registry (formats registered at
        run time exist here only); None when unknown here."""
        try:
            return F.answer_spec(answer_format).structured
        except F.FormatError:
            return None

    def serve(self, indices: list[int]) -> list[Outcome]:
        outcomes, retries = self.pool.serve([self.task(i) for i in indices], self.limits, self.wire)
        for i, n in zip(indices, retries):
            self.retried(i, n)
        return outcomes

    def settle(self, i: int, outcome: Outcome) -> Future | None:
        """Record a grading process's outcome for item ``i``; a program to run is started (its
        future returned)."""
        if isinstance(outcome, Graded):
            self.finish(i, outcome.grade)
        elif isinstance(outcome, Over):
            self.fail(i, outcome.error, outcome.detail)
        elif isinstance(outcome, Failed):
            self.fail(i, "killed", "grading this response failed: " + outcome.text)
        elif self.sandbox is None:
            self.fail(i, "killed", "the response's program needs a sandbox; none was given")
        elif self.inline:  # one response (a grade() call): run it here, no thread to start
            self.run(i, outcome)
        else:  # called from grade()'s thread only: the pool is made once, when first needed
            if self.runners is None:  # two requests per sandbox worker at a time
                self.runners = ThreadPoolExecutor(2 * self.sandbox.workers)
            return self.runners.submit(self.run, i, outcome)
        return None

    def run(self, i: int, need: NeedsRun) -> None:
        """Run what item ``i``'s program needs in the sandbox, then have it graded with the results."""
        assert self.sandbox is not None
        ran: dict[str, list] = {}
        outcome: Outcome = need
        for _ in range(MAX_ROUNDS):
            assert isinstance(outcome, NeedsRun)
            done = self.sandbox.run_request(outcome.sent)
            self.retried(i, done.retries)
            raw = [(r.status, r.value, r.detail) for r in done.results]
            position = 0
            for (_, calls, _), key in zip(outcome.sent, outcome.keys):
                ran[key] = raw[position:position + len(calls)]
                position += len(calls)
            (outcome,) = self.serve_one(i, ran)
            if not isinstance(outcome, NeedsRun):
                self.settle(i, outcome)
                return
        self.fail(i, "killed", f"the response's program asked for {MAX_ROUNDS} runs")

    def serve_one(self, i: int, ran: dict) -> list[Outcome]:
        outcomes, (retries,) = self.pool.serve([self.task(i, ran)], self.limits, self.wire)
        self.retried(i, retries)
        return outcomes

    def grade(self, n_proc: int) -> list:
        todo: list[int] = []
        for i, text in enumerate(self.texts):
            big = judge.too_large(self.truths[i], self.mode, text) if i in self.truths else None
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

    def _settled(self, span: list[int], outcomes: list[Outcome]) -> list[Future]:
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
    :data:`opgen.score.judge.MAX_RESPONSE_CHARS`; ``timeout``/``killed`` when grading it overran its budget or crashed
    a grading process). The text is parsed, compiled and statically evaluated only in a grading
    process (below), never in this one. A bad setting or ground truth (the
    caller's, not the model's) raises ValueError/:class:`GroundTruthError`."""
    record = GradeSettings.resolve(settings, policy=policy, group=group, mode=mode, namespace=namespace,
                                   static=static, diagnose=diagnose, library=library).for_row(ground_truth)
    mode = record.mode
    truth = judge.load_truth(ground_truth)
    text = judge.response_text(response)
    big = judge.too_large(truth, mode, text)
    if big is not None:
        return big
    effective = truth.mode if mode == "auto" or truth.native else mode
    box = sandbox
    if box is None and effective == "program":
        box = shared()
    item = Item(ground_truth, text, answer_format, assistant_prefix)
    return grade_many([item], sandbox=box, settings=record)[0]
