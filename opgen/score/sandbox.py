"""Run model-written code in isolated processes and get back values or error classes.

A :class:`Sandbox` keeps ``workers`` warm worker processes (``opgen/score/jail/``, started once,
before any model code exists, sealed from this process: opgen/score/spawn.py). Each request goes to
one idle worker, which forks a fresh isolated
child for it, enforces the wall-clock timeout by killing the child's process group, and returns
one ``(status, value, detail)`` per call. The expected values never leave the caller: comparing
is the caller's job, so nothing a program prints, redefines or exits with can make it pass.

The pool is thread-safe (verl calls reward functions from threads): each request checks out an
idle worker from a queue, so no signal handling or global state is involved.
"""

from __future__ import annotations
import __future__

import ast
import atexit
import marshal
import math
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any, Generic, TypeVar

from opgen import faults
from opgen.errors import OpgenError
from opgen.expr import parse_python
from opgen.score import spawn
from opgen.score.cache import BoundedCache
from opgen.score.jail import base, wire
from opgen.score.jail.steps import FULL_NEEDS, ISOLATION, RISKS

# The worker runs as a script (``python -I -S jail/__main__.py``, no opgen on its path): the wire
# format and the isolation mechanisms live in its package, which this end imports
# (tests/test_sandbox_wire.py, tests/test_isolation_registry.py).
WORKER = Path(wire.__file__).with_name("__main__.py")
STATUSES = wire.RESULTS  # what a call's Result.status can be
DETAIL_CAP = wire.DETAIL_CAP
MECHANISMS = tuple(ISOLATION)  # what a worker's hello reports, in order


@dataclass(frozen=True)
class Job:
    """One call ``entry(*args)`` of a program, run in its own fresh child."""

    code: str
    entry: str
    args: tuple = ()


@dataclass(frozen=True)
class Unit:
    """A program and several calls of it, run in one child (use only for calls of ONE response).

    ``fail_fast``: after one call times out or crashes, the unit's remaining calls get the same
    result without running (probes of a definition that loops would otherwise cost a timeout each).
    """

    code: str
    calls: tuple[tuple[str, tuple], ...] = field(default=())
    fail_fast: bool = False
    # The trusted side's own parse of ``code`` (``ast.parse`` of the whole text), when it has one:
    # chunk boundaries are taken from it, so what runs is what was checked, parsed once.
    tree: ast.Module | None = field(default=None, compare=False, repr=False)
    # ``(module, name)`` pairs bound before the program runs (``namespace="native"``: the names the
    # native benchmark's module had imported at its top), as ``from module import name`` would.
    imports: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Result:
    status: str
    value: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Ran:
    """A request's results, and how many times it was retried because its worker died (0 or 1)."""

    results: list[Result]
    retries: int


class SandboxError(RuntimeError, OpgenError):
    """The sandbox itself failed (a worker could not start); never a verdict on model code."""

    exit_code = 1


# Model code has always been compiled with postponed annotations (the worker's own future flag);
# compiling it here keeps that, so no grade changes with where it is compiled. And never optimised,
# whatever this process runs under (-O, PYTHONOPTIMIZE): ``__debug__`` is true and asserts run, as
# plain CPython runs the program.
_COMPILE_FLAGS = __future__.annotations.compiler_flag
_OPTIMIZE = 0
_warnings_lock = threading.Lock()


def _compile(code: str, tree: ast.Module | None = None,
             imports: tuple[tuple[str, str], ...] = ()) -> bytes | tuple[str, str] | None:
    """The marshalled code of ``code``, a ``(status, detail)`` when it cannot compile, or None
    when the child must try itself.

    Compiling is not running: the scorer already parses the same text with ``ast.parse`` (structure
    and recall checks), and compile adds only the symbol table and code generation. Done here, each
    child merely unmarshals (a fresh child compiling pays ~0.5 ms of page faults for the compiler's
    memory; see docs/scoring.md). Failures that depend on the process (recursion depth, memory)
    are left to the child, whose limits decide them as before. ``imports`` run first, in the
    program's namespace, as their own block (the program's line numbers do not move).
    """
    # Compile-time warnings (invalid escapes, ``is`` with a literal) belong to the model, not the
    # scorer's stderr; and ``-W error`` must not turn them into syntax errors here.
    with _warnings_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            blocks = _compile_chunks(code, tree)
            if blocks is None:
                blocks = (compile(code, "<answer>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True,
                                   optimize=_OPTIMIZE),)
            if imports:
                blocks = (_prelude(imports), *blocks)
            return marshal.dumps(blocks if len(blocks) > 1 else blocks[0])
        except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
            return "syntax", wire.detail_of(exc)  # the text the worker's child gives
        except Exception:  # RecursionError, MemoryError: the child's own limits decide
            return None


def compile_units(units: Sequence[Unit]) -> tuple[dict[int, Result], list]:
    """What :meth:`Sandbox.run_units` sends a child: ``(failed, sent)``, the results of the units
    that do not compile (every call of such a unit fails here, without a child) by unit position,
    and the request entries of the others. No ``sent``: the results need no child at all."""
    failed: dict[int, Result] = {}
    sent = []
    for i, u in enumerate(units):
        if not u.calls:
            continue
        code = _compile(u.code, u.tree, u.imports)
        if isinstance(code, tuple):
            failed[i] = Result(code[0], None, code[1])
            continue
        sent.append((_source(u) if code is None else code, [(e, tuple(a)) for e, a in u.calls], u.fail_fast))
    return failed, sent


def _source(u: Unit) -> object:
    """What the child compiles for a unit sent as text: the text, after the prelude of its
    ``imports`` (compiled here: opgen's own text, never the model's)."""
    if not u.imports:
        return u.code
    return [marshal.dumps(_prelude(u.imports)), u.code]


def assemble(units: Sequence[Unit], failed: dict[int, Result], raw: Sequence[Result]) -> list[Result]:
    """The results of ``units`` in call order: the failed units' and the child's (``raw``)."""
    out: list[Result] = []
    position = 0
    for i, u in enumerate(units):
        if i in failed:
            out.extend([failed[i]] * len(u.calls))
        else:
            out.extend(raw[position:position + len(u.calls)])
            position += len(u.calls)
    return out


def _prelude(imports: tuple[tuple[str, str], ...]) -> CodeType:
    text = "".join(f"from {module} import {name}\n" for module, name in imports)
    return compile(text, "<namespace>", "exec", dont_inherit=True, optimize=_OPTIMIZE)


# Top-level definitions, compiled once per exact text: models recall operator bodies verbatim, so
# of a typical program only its own main function is new (compiling all of it costs ~0.2 ms).
#
# What runs is decided by ONE parse of the whole program (``ast``, the scorer's own, shared with the
# structure check): a block starts at the first line (decorators included) of a top-level ``def``/
# ``class`` statement, lines counted as Python counts them (``\n``, ``\r\n`` and ``\r`` end a line;
# a form feed, ``\v``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028``/``\u2029`` do not, although
# ``str.splitlines`` breaks at them: splitting there ran code that Python reads as a comment).
# Programs with module-level statements whose separate compilation would differ from compiling the
# whole (future imports, ``global``/``nonlocal``, module-level annotations, any compound statement
# other than a definition) are compiled whole.
_LINE_END = re.compile(r"\r\n?|\n")  # fixed length: one forward scan
_SIMPLE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AugAssign, ast.Expr, ast.Import,
           ast.ImportFrom, ast.Pass, ast.Delete, ast.Assert, ast.Raise)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Bounded in bytes (opgen/score/cache.py): each entry is charged 4 bytes per character of its text
# (the key) plus 4x its marshalled code (a code object in memory is a few times its marshal); the
# oldest entries go first. A chunk is a pure function of its text: nothing a program does can change
# what is cached for another.
CHUNK_CACHE_BYTES = 32 << 20
_CHUNKS: BoundedCache[str, CodeType] = BoundedCache(CHUNK_CACHE_BYTES)


def _parse(code: str) -> ast.Module | None:
    try:
        tree = parse_python(code)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: compiled whole
        return None
    return tree if isinstance(tree, ast.Module) else None


def _chunk_lines(tree: ast.Module) -> list[int] | None:
    """The first line (1-based) of each block, or None when the program must be compiled whole."""
    body = tree.body
    starts = [1]
    prev_end = 0
    for node in body:
        if not isinstance(node, _SIMPLE) or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            return None
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        if isinstance(node, _DEFS) and first > prev_end and first > 1:
            starts.append(first)
        prev_end = max(prev_end, node.end_lineno or node.lineno)
    return starts if len(starts) >= 2 else None


def _compile_chunks(code: str, tree: ast.Module | None = None) -> tuple[CodeType, ...] | None:
    """``code`` as code objects of its top-level blocks, to run in order in one namespace; None
    unless that is exactly running ``code`` (then it is compiled whole).

    ``tree`` is the caller's ``ast.parse`` of ``code`` (parsed here when not given). A block that
    does not compile alone (an error the compiler, not the parser, finds) sends the whole program
    to ``compile``, which gives the error it would. Line numbers are the whole program's, and
    equal constants are shared across blocks, as one compilation shares them.
    """
    if tree is None:
        tree = _parse(code)
        if tree is None:
            return None
    starts = _chunk_lines(tree)
    if starts is None:
        return None
    offsets = [0]
    offsets += [m.end() for m in _LINE_END.finditer(code)]
    if starts[-1] > len(offsets):
        return None
    bounds = [offsets[line - 1] for line in starts] + [len(code)]
    canon: dict = {}
    out = []
    for first_line, lo, hi in zip(starts, bounds, bounds[1:]):
        text = code[lo:hi]
        chunk = _CHUNKS.get(text)
        if chunk is None:
            try:
                chunk = compile(text, "<answer>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True,
                                optimize=_OPTIMIZE)
            except (SyntaxError, ValueError):
                return None
            _CHUNKS.put(text, chunk, 4 * len(text) + 4 * len(marshal.dumps(chunk)) + 200)
        out.append(_relocated(chunk, first_line - 1, canon))
    return tuple(out)


def _relocated(code: CodeType, offset: int, canon: dict) -> CodeType:
    """``code`` moved down ``offset`` lines, its constants replaced by the program's shared ones."""
    consts = tuple(_relocated(c, offset, canon) if isinstance(c, CodeType) else _shared_const(c, canon)
                   for c in code.co_consts)
    return code.replace(co_firstlineno=code.co_firstlineno + offset, co_consts=consts)


def _shared_const(value: Any, canon: dict) -> object:
    # The compiler's own rule (one constant object per equal value and type, -0.0 apart from 0.0,
    # NaN never merged), so that ``is`` between constants of two blocks answers as it would.
    kind = type(value)
    key: tuple[object, ...]
    if kind is tuple:
        value = tuple(_shared_const(v, canon) for v in value)
        key = (kind, tuple(id(v) for v in value))
    elif kind is frozenset:
        value = frozenset(_shared_const(v, canon) for v in value)
        key = (kind, frozenset(id(v) for v in value))
    elif kind is float and value == value:
        key = (kind, value, math.copysign(1.0, value))
    elif kind is complex and value == value:
        key = (kind, value.real, value.imag, math.copysign(1.0, value.real), math.copysign(1.0, value.imag))
    elif kind in (str, bytes, int, bool):
        key = (kind, value)
    else:  # None, Ellipsis, NaN: themselves
        return value
    return canon.setdefault(key, value)


# ------------------------------------------------------------------ isolation levels
#
# The mechanisms are the worker's (opgen/score/jail/: one module each, with its description, its risk
# and its code; jail/steps.py lists them and the order their steps run). Here: what the scorer makes
# of a worker's report: the level, the refusal and the warning read the descriptions.

ALLOW_WEAK_ENV = "OPGEN_ALLOW_WEAK_SANDBOX"


class WeakSandboxWarning(RuntimeWarning):
    """Grading runs below ``full`` isolation because it was asked to (the message lists the risks)."""


def mechanisms(isolation: dict) -> tuple[str, ...]:
    """The mechanisms in force, in registry order (the worker's :data:`MECHANISMS` first)."""
    return tuple(k for k in ISOLATION if isolation.get(k))


def missing(isolation: dict) -> tuple[str, ...]:
    """What ``full`` needs and ``isolation`` lacks, in :data:`FULL_NEEDS` order (``uid``: neither a
    uid drop nor a user namespace)."""
    met = {m.need for m in ISOLATION.values() if m.need is not None and isolation.get(m.name)}
    return tuple(n for n in FULL_NEEDS if n not in met)


def isolation_level(isolation: dict) -> str:
    """``full`` when every mechanism ``full`` needs is in force, else ``partial(<present>)``, or
    ``rlimits`` alone."""
    if not missing(isolation):
        return "full"
    present = [k for k in mechanisms(isolation) if ISOLATION[k].in_level]
    return f"partial({'+'.join(present)})" if present else "rlimits"


def weak_message(isolation: dict) -> str:
    """What is unprotected at this level, one risk a line (the texts of :data:`RISKS`)."""
    lack = missing(isolation)
    risks, seen = [], set()
    for k in lack:
        if RISKS[k] not in seen:
            seen.add(RISKS[k])
            risks.append(f"  - without {k}: {RISKS[k]}")
    return (f"sandbox isolation is {isolation_level(isolation)}, below 'full' (missing: {', '.join(lack)}); "
            "unprotected then:\n" + "\n".join(risks))


def allow_weak_for_this_process() -> None:
    """What ``--allow-weak-sandbox`` does: every sandbox this process starts may run below ``full``
    (through the environment variable, so that it also reaches code that builds its own)."""
    os.environ[ALLOW_WEAK_ENV] = "1"


def check_isolation(allow_weak_sandbox: bool | None = None) -> str:
    """Start one worker to learn the level here; raise :class:`SandboxError` (with the risks) where
    it is below ``full`` and weak isolation was not asked for. Returns the level. Commands that
    grade only after hours of work (``opgen eval``) call this first."""
    with Sandbox(workers=1, allow_weak_sandbox=allow_weak_sandbox) as box:
        return box.level


def _weak_allowed(flag: bool | None) -> bool:
    if flag is not None:
        if not isinstance(flag, bool):  # a string "false" must not read as true
            raise ValueError(f"allow_weak_sandbox must be True, False or None, got {flag!r}")
        return flag
    return os.environ.get(ALLOW_WEAK_ENV, "") == "1"


def _make_nondumpable() -> bool:
    # Children that keep the scorer's uid could otherwise open /proc/<scorer>/mem (the expected
    # outputs live there) or ptrace it.
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(base.PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


# How long a new worker may take to say hello (start an interpreter, set its jail up).
WORKER_START_S = 30.0


class _Worker:
    """One sandbox worker, started sealed (opgen/score/spawn.py: a bare ``python -I -S``, an empty
    environment, ``/`` as its directory): model code must find no token, path or answer in its
    environment, and nothing of the caller's reaches the worker."""

    def __init__(self, argv: list[str]):
        self.root_dir = tempfile.mkdtemp(prefix="opgen-sandbox-")
        os.chmod(self.root_dir, 0o755)
        try:
            helper, hello = spawn.start([*argv, self.root_dir], "a sandbox worker", WORKER_START_S)
            said = wire.Hello.from_wire(hello)
        except (OSError, spawn.StartFailed, ValueError) as exc:
            shutil.rmtree(self.root_dir, ignore_errors=True)
            raise SandboxError(f"cannot start a sandbox worker ({argv[0]} {argv[3]}): {exc}") from None
        self.proc, self.wfd, self.rfd, self.reader = helper.proc, helper.wfd, helper.rfd, helper.reader
        self.isolation: dict = said.isolation
        self.pid = said.pid  # the serving worker's, on the host (inside its namespaces); -1 if unknown

    def send(self, data: bytes) -> None:
        wire.write_all(self.wfd, data)

    def receive(self, deadline_s: float, max_bytes: int = 1 << 30) -> object:
        """The next message within ``deadline_s`` seconds, refused past ``max_bytes`` before it is read."""
        deadline = time.monotonic() + deadline_s
        while True:
            size = self.reader.size()
            if size is not None and size > max_bytes:
                raise SandboxError(f"sandbox worker sent {size} bytes, more than {max_bytes}")
            got, payload = self.reader.take()
            if got:
                return payload
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                raise SandboxError("sandbox worker stopped answering")
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise SandboxError(f"sandbox worker exited ({spawn.how_it_ended(self.proc.poll())})")
            self.reader.feed(chunk)

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root_dir, ignore_errors=True)


W = TypeVar("W")


class FairPool(Generic[W]):
    """Idle workers handed out first come, first served: a thread returning a worker cannot take it
    straight back while others wait (a plain queue let 2 of 7 threads make ~3,750 calls and 5 make
    one); the returned worker goes to the longest waiter. (The sandbox's workers, and the grading
    processes of opgen/score/batch.py.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: deque[W] = deque()
        self._waiters: deque[list] = deque()  # [event, worker or None]

    def put(self, worker: W) -> None:
        with self._lock:
            if self._waiters:
                slot = self._waiters.popleft()
                slot[1] = worker
                slot[0].set()
                return
            self._idle.append(worker)

    def has_idle(self) -> bool:
        with self._lock:
            return bool(self._idle)

    def get(self) -> W:
        with self._lock:
            if self._idle and not self._waiters:
                return self._idle.popleft()
            slot: list = [threading.Event(), None]
            self._waiters.append(slot)
        slot[0].wait()
        return slot[1]


_STATUS_SET = frozenset(STATUSES)


class Sandbox:
    """A pool of warm, isolated workers. Use as a context manager, or call :meth:`close`.

    ``timeout_s`` bounds each call (and the loading of each program) in wall-clock seconds;
    ``budget_s`` (default twice ``timeout_s``) bounds all calls of one :meth:`run_units` (one
    response: its program and its recall probes together) in wall-clock and CPU seconds;
    ``memory_mb`` is the address space a program's process may add, and at most ``nproc``
    processes and threads run for it (so its processes together stay under ``nproc`` times that);
    ``max_output`` caps a returned value's characters; ``work_mb``/``work_inodes`` cap the work area;
    ``namespaces=False`` skips the namespaces and the chroot; ``imports="open"`` leaves model code
    every loaded module (not ``full``: for tests of the layers below the import allowlist, which
    must hold on their own, since in-process restrictions can be defeated by crafted code
    objects). Below ``full`` isolation the
    sandbox refuses to start unless ``allow_weak_sandbox`` is true (default: the environment
    variable ``OPGEN_ALLOW_WEAK_SANDBOX=1``); it then warns with what is unprotected.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 2.0, memory_mb: int = 512, max_output: int = 100_000,
                 fsize_bytes: int = 1 << 20, nofile: int = 64, nproc: int = 8, namespaces: bool = True,
                 budget_s: float | None = None, work_mb: int = 16, work_inodes: int = 4096,
                 allow_weak_sandbox: bool | None = None, imports: str = "allowlist"):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.timeout_s = float(timeout_s)
        self.budget_s = float(budget_s) if budget_s is not None else 2 * self.timeout_s
        if self.budget_s < self.timeout_s:
            raise ValueError(f"budget_s ({self.budget_s:g}) must be at least timeout_s ({self.timeout_s:g})")
        self.memory_mb, self.max_output = int(memory_mb), int(max_output)  # read by opgen/score/static.py
        self.nproc = nproc
        limits = {"as_bytes": memory_mb << 20, "fsize_bytes": fsize_bytes, "nofile": nofile, "nproc": nproc,
                  "max_output": max_output, "work_bytes": work_mb << 20, "work_inodes": work_inodes}
        self._argv = [sys.executable, "-I", "-S", str(WORKER), *wire.worker_args(limits, namespaces, imports)]
        self._idle: FairPool[_Worker] = FairPool()
        self._lock = threading.Lock()
        self._closed = False
        self._all: list[_Worker] = []
        self._sent = 0  # requests sent (the fault hook's count)
        with ThreadPoolExecutor(workers) as pool:
            started = list(pool.map(lambda _: _Worker(self._argv), range(workers)))
        self.isolation: dict = {k: v for k, v in started[0].isolation.items() if k != "uid"}
        self.level = isolation_level(self.isolation)
        self.mechanisms = mechanisms(self.isolation)
        self.risks = missing(self.isolation)
        if self.level != "full":
            if not _weak_allowed(allow_weak_sandbox):
                for w in started:
                    w.close()
                raise SandboxError(weak_message(self.isolation) + "\nGrading refuses to start. To grade anyway, "
                                   "pass --allow-weak-sandbox (opgen score / opgen eval), allow_weak_sandbox=True "
                                   f"(compute_score, Sandbox, score_files) or set {ALLOW_WEAK_ENV}=1.")
            warnings.warn(weak_message(self.isolation), WeakSandboxWarning, stacklevel=2)
        if not self.isolation.get("uid_drop"):
            self.isolation["scorer_nondumpable"] = _make_nondumpable()
        for w in started:
            self._all.append(w)
            self._idle.put(w)
        # Each worker's children run under a uid of that worker's own (see worker.py).
        self.uids: tuple[int, ...] = tuple(int(w.isolation["uid"]) for w in started)
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="opgen-sandbox")
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, type(self)._shutdown, self._all, self._pool, self._pid)

    # -- running

    def run_units(self, units: Sequence[Unit]) -> list[Result]:
        """Run the units of ONE response in one child (restarted after a timeout or crash), all of
        them within one budget (``budget_s``)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if os.getpid() != self._pid:
            raise SandboxError("a Sandbox cannot be used from a forked process; create one there "
                               "(opgen.score.sandbox.shared() does)")
        if sum(len(u.calls) for u in units) == 0:
            return []
        # Nothing of the text is compiled here: the child compiles it (the grading processes send
        # their own compilation through run_sent).
        return self.run_sent([(_source(u), [(e, tuple(a)) for e, a in u.calls], u.fail_fast)
                              for u in units if u.calls])

    def run_sent(self, sent: Sequence) -> list[Result]:
        """Run a request's units as :func:`compile_units` gives them (``(code, calls, fail_fast)``,
        ``code`` marshalled code, source text, or ``[prelude code, source text]``), in one child;
        the results in call order. The code is passed on as it is: this process does not read it."""
        return self.run_request(sent).results

    def run_request(self, sent: Sequence) -> Ran:
        """:meth:`run_sent`'s results, with the number of times the request was retried on a fresh
        worker because the one running it died (a dead worker is not the response's fault: it is
        retried once, and only a request whose worker dies again is ``killed``)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if os.getpid() != self._pid:
            raise SandboxError("a Sandbox cannot be used from a forked process; create one there "
                               "(opgen.score.sandbox.shared() does)")
        units = [(code, [(str(e), tuple(a)) for e, a in calls], bool(fail_fast)) for code, calls, fail_fast in sent]
        request = wire.Request(units, self.timeout_s, self.budget_s)
        n_calls = request.calls()
        return self._request(request, n_calls) if n_calls else Ran([], 0)

    def _request(self, request: wire.Request, n_calls: int) -> Ran:
        message = wire.encode(request.to_wire())
        # The worker enforces the timeouts and the budget; this only guards against a worker that hangs.
        guard = self.budget_s * 2 + 30.0
        # A reply is n_calls triples of capped strings; anything larger is not the worker's.
        max_bytes = wire.reply_cap(n_calls, self.max_output)
        lost = ""
        for retries in (0, 1):
            worker = self._idle.get()
            try:
                try:
                    self._fault(worker)
                    worker.send(message)
                    return Ran(self._checked(worker.receive(guard, max_bytes), n_calls), retries)
                except (SandboxError, OSError, ValueError, EOFError, TypeError) as exc:
                    lost = str(exc)
                    worker = self._replace(worker)
            finally:
                self._idle.put(worker)
        return Ran([Result("killed", None, f"sandbox worker lost: {lost} (and again on the request's retry in a "
                                           "fresh worker)")] * n_calls, 1)

    def _fault(self, worker: _Worker) -> None:
        """Test-only (``OPGEN_FAULT=sandbox-sent[-N]:SIG``, opgen/faults.py): a signal to the serving
        worker as it is given the request (the Nth of this sandbox, or every one), as the OOM killer
        would send it: it dies with the request in hand."""
        with self._lock:
            self._sent += 1
            serial = self._sent
        if worker.pid > 1:  # (-1: not known; never a group, init or every process)
            faults.signal_nth("sandbox-sent", serial, worker.pid)

    def _checked(self, raw: object, n_calls: int) -> list[Result]:
        # The caps are the worker's job; checked once more here, on the trusted side, so that no
        # reply shape or size the scorer did not expect reaches a grade (a bad item: the worker
        # is replaced). Most items are "ok": that path is kept short.
        if type(raw) is not list or len(raw) != n_calls:
            raise SandboxError(f"malformed reply ({type(raw).__name__})")
        cap, out = self.max_output, []
        for status, value, detail in raw:  # not a triple: ValueError/TypeError, a lost worker
            if status == "ok":
                if type(value) is not str:
                    raise SandboxError("malformed reply value")
                if len(value) > cap:
                    out.append(Result("output_too_large", None, f"{len(value)} characters > {cap}"))
                    continue
            elif status not in _STATUS_SET or value is not None:
                raise SandboxError("malformed reply item")
            if type(detail) is not str:
                raise SandboxError("malformed reply detail")
            out.append(Result(status, value, detail if len(detail) <= DETAIL_CAP else detail[:DETAIL_CAP]))
        return out

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        """Run each job in its own fresh child, in parallel over the workers; results in job order."""
        units = [Unit(j.code, ((j.entry, tuple(j.args)),)) for j in jobs]
        if len(units) <= 1:
            return [r for u in units for r in self.run_units([u])]
        return [rs[0] for rs in self._pool.map(lambda u: self.run_units([u]), units)]

    def _replace(self, dead: _Worker) -> _Worker:
        dead.proc.kill()
        dead.close()
        fresh = _Worker(self._argv)
        with self._lock:
            self._all[self._all.index(dead)] = fresh
        return fresh

    # -- lifetime

    @staticmethod
    def _shutdown(workers: list[_Worker], pool: ThreadPoolExecutor, owner: int) -> None:
        if os.getpid() != owner:
            return  # a forked copy of the owner (a trainer's worker process): the workers are not ours
        pool.shutdown(wait=False)
        for w in workers:
            w.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: Sandbox | None = None
_shared_lock = threading.Lock()


def shared(workers: int | None = None, allow_weak_sandbox: bool | None = None) -> Sandbox:
    """A process-wide sandbox, started on first use (the verl reward entry point uses it).
    ``allow_weak_sandbox``: see :class:`Sandbox` (default: ``OPGEN_ALLOW_WEAK_SANDBOX=1``)."""
    global _shared
    with _shared_lock:
        # A process forked after the pool started (Ray, multiprocessing) must not share its pipes.
        if _shared is not None and not _shared._closed and _shared._pid == os.getpid() \
                and _shared.level != "full" and not _weak_allowed(allow_weak_sandbox):
            # Weak grading allowed once (by an earlier call's flag) is not allowed for this call.
            raise SandboxError(weak_message(_shared.isolation) + "\nGrading refuses: this call did not allow "
                               f"weak isolation (allow_weak_sandbox=True or {ALLOW_WEAK_ENV}=1).")
        if _shared is None or _shared._closed or _shared._pid != os.getpid():
            n = workers or int(os.environ.get("OPGEN_SANDBOX_WORKERS", "0")) or min(4, os.cpu_count() or 1)
            _shared = Sandbox(workers=n, timeout_s=float(os.environ.get("OPGEN_SANDBOX_TIMEOUT", "2.0")),
                              allow_weak_sandbox=allow_weak_sandbox)
            atexit.register(_shared.close)
        return _shared
