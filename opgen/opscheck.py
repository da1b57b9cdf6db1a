"""Property laws for any operator library (issue 25): what ``opgen ops check`` runs.

Each law is checked per operator with Hypothesis (``examples`` draws each, seeded, so a run is
deterministic), and a broken law is reported with Hypothesis's shrunk counterexample. Inputs are
what the native generator draws: strings over :data:`opgen.rng.LOWERCASE` (0 to
:data:`MAX_INPUT_CHARS` characters; composed expressions feed operators longer values than the
3-10 characters of a native input) and each parameter's declared range (:class:`opgen.ops.Param`).

The laws (:data:`LAWS`):

- ``standalone``: the source, compiled alone in a fresh namespace, equals the library's operator
  (and compiles alone in a fresh ``python -I`` process, checked with ``pure``).
- ``total``: no exception, and a ``str`` back, on every drawn input.
- ``deterministic``: the same result twice in a row.
- ``pure``: the call changes no global of the operator's namespace, does no I/O (no audit event of
  :data:`IO_EVENTS`: opening a file, the ``os``, ``socket``, ``subprocess`` ... families), and a
  fresh ``python -I`` process that compiled the source alone returns the same results on the
  inputs drawn here.
- ``out_len``: the declared growth bound (``Operator.out_len``) is the exact output length.
- ``recursion``: the operator's frames on the stack never exceed the static grader's limit
  (``opgen.score.static.MAX_RECURSION``; the sandbox's is higher).
- ``cost``: the static cost bound (``Operator.cost``) bounds the measured cost: the output is no
  longer than its longest output, and the recursion (the most frames of one function of the
  operator's source on the stack at once; one frame is no recursion, 0) no deeper than its depth.
  Work is not measured.

``out_len`` and ``cost`` are ``n/a`` for an operator without that bound. The laws assume the
operator terminates on its declared domain: a loop that never ends hangs the check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opgen.errors import USAGE, OpgenError
from opgen.ops import Operator, OperatorLibrary, Param
from opgen.rng import LOWERCASE

LAWS: tuple[str, ...] = ("standalone", "total", "deterministic", "pure", "out_len", "recursion", "cost")
MAX_INPUT_CHARS = 48  # the longest drawn string input
FRESH_INPUTS = 2_000  # inputs per operator replayed in the fresh process (the first drawn)
CHECK_EXTRA = "check"  # the extra that installs hypothesis: pip install 'opgen[check]'

HELD, BROKEN, NA = "held", "broken", "n/a"

# Audit events (PEP 578) that are I/O or reach outside the process: "open", and every event of
# these families (os.listdir, os.system, socket.connect, subprocess.Popen, ...).
IO_EVENTS: tuple[str, ...] = ("open",)
IO_FAMILIES: tuple[str, ...] = ("os", "socket", "subprocess", "shutil", "urllib", "http", "ftplib", "smtplib",
                                "ctypes", "sqlite3", "webbrowser", "glob", "tempfile", "time.sleep")
_WATCH = threading.local()  # .events: the I/O events of the call being watched on this thread, or None
_HOOKED: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    events = getattr(_WATCH, "events", None)
    if events is not None and (event in IO_EVENTS or event.split(".")[0] in IO_FAMILIES or event in IO_FAMILIES):
        events.append(event)


def _watch_io() -> None:
    """Install the audit hook once per process (a hook cannot be removed; it records only while a
    call is watched)."""
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)


class MissingHypothesis(ImportError, OpgenError):
    """``opgen ops check`` needs hypothesis (the ``check`` extra)."""

    exit_code = USAGE


@dataclass(frozen=True)
class LawResult:
    op_id: str
    law: str
    status: str  # HELD, BROKEN or NA
    calls: int = 0  # operator inputs tried (drawn and shrunk)
    message: str = ""
    counterexample: tuple[Any, ...] | None = None  # the shrunk arguments
    call: str = ""  # the counterexample as a call, e.g. func_3('ab')

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"op": self.op_id, "law": self.law, "status": self.status, "calls": self.calls}
        if self.status == BROKEN:
            row["message"] = self.message
            row["counterexample"] = None if self.counterexample is None else list(self.counterexample)
            row["call"] = self.call
        return row


@dataclass(frozen=True)
class Report:
    library: str
    digest: str
    n_operators: int
    examples: int
    seed: int
    results: tuple[LawResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(r.status != BROKEN for r in self.results)

    @property
    def broken(self) -> tuple[LawResult, ...]:
        return tuple(r for r in self.results if r.status == BROKEN)

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(r.status == s for r in self.results) for s in (HELD, BROKEN, NA)}
        return {"library": self.library, "digest": self.digest, "n_operators": self.n_operators,
                "examples": self.examples, "seed": self.seed, "laws": list(LAWS), "ok": self.ok,
                "counts": counts, "results": [r.to_json() for r in self.results]}

    def render(self) -> str:
        lines = [f"library {self.library} ({self.digest[:12]}): {self.n_operators} operators, {len(LAWS)} laws, "
                 f"{self.examples} examples per law, seed {self.seed}"]
        for r in self.broken:
            lines.append(f"BROKEN {r.op_id} {r.law}: {r.message}")
            if r.call:
                lines.append(f"    counterexample: {r.call}")
        held = sum(r.status == HELD for r in self.results)
        na = sum(r.status == NA for r in self.results)
        lines.append(f"{held} held, {len(self.broken)} broken, {na} n/a" + ("" if self.ok else " - FAILED"))
        return "\n".join(lines)


class _Broken(Exception):
    def __init__(self, message: str, args: tuple[Any, ...]):
        super().__init__(message)
        self.message = message
        self.call_args = args


def render_call(op_id: str, args: Sequence[Any]) -> str:
    return f"{op_id}({', '.join(repr(a) for a in args)})"


_CALL_LIMIT: list[int] = []  # call_recursion_limit(), once read


def call_recursion_limit() -> int:
    """The recursion limit a law's call runs under, here and in the fresh process: the sandbox's
    grading child's (its one home, ``CHILD_RECURSION_LIMIT`` of opgen/score/jail/child.py; read on
    first use, so importing this module loads no part of the scorer)."""
    if not _CALL_LIMIT:
        from opgen.score.jail.child import CHILD_RECURSION_LIMIT

        _CALL_LIMIT.append(CHILD_RECURSION_LIMIT)
    return _CALL_LIMIT[0]


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, str]:
    """("ok", value) for a str, ("value", repr) for anything else, ("raise", "Type: message"), the
    call run under the sandbox's recursion limit (Hypothesis lowers the interpreter's while it runs)."""
    limit, need = sys.getrecursionlimit(), call_recursion_limit()
    if limit < need:
        sys.setrecursionlimit(need)
    try:
        value = fn(*args)
    except Exception as exc:
        return ("raise", f"{type(exc).__name__}: {exc}")
    finally:
        sys.setrecursionlimit(limit)
    return ("ok", value) if isinstance(value, str) else ("value", f"{type(value).__name__} {value!r}")


def _shown(outcome: tuple[str, str]) -> str:
    kind, value = outcome
    return repr(value) if kind == "ok" else (f"raised {value}" if kind == "raise" else f"returned {value}")


def _strategy(op: Operator) -> Any:
    from hypothesis import strategies as st

    text = st.text(alphabet=LOWERCASE, max_size=MAX_INPUT_CHARS)
    if op.n_inputs == 2:
        return st.tuples(text, text)
    return st.tuples(text, *(_param_strategy(p) for p in op.params))


def _param_strategy(p: Param) -> Any:
    from hypothesis import strategies as st

    if p.kind == "int":
        return st.integers(p.lo, p.hi)
    if p.kind == "choice":
        return st.sampled_from(p.choices)
    return st.text(alphabet=LOWERCASE, min_size=p.lo, max_size=p.hi)


class _Frames:
    """The operator's frames while it runs (a profiler): the most on the stack at once, and the most
    of one function (its recursion)."""

    def __init__(self, filename: str):
        self.filename = filename
        self.active: dict[Any, int] = {}
        self.now = self.most = self.deepest_one = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename == self.filename:
                c = self.active.get(code, 0) + 1
                self.active[code] = c
                self.now += 1
                self.most = max(self.most, self.now)
                self.deepest_one = max(self.deepest_one, c)
        elif event == "return":
            code = frame.f_code
            if code.co_filename == self.filename and self.active.get(code, 0) > 0:
                self.active[code] -= 1
                self.now -= 1

    @property
    def recursion(self) -> int:
        return self.deepest_one if self.deepest_one > 1 else 0


def _measured(op: Operator, args: tuple[Any, ...]) -> tuple[tuple[str, str], _Frames]:
    code = getattr(op.fn, "__code__", None)  # a callable that is not a Python function: no frames of its own
    frames = _Frames(code.co_filename if code is not None else "<no Python code>")
    previous = sys.getprofile()
    sys.setprofile(frames)
    try:
        outcome = _outcome(op.fn, args)
    finally:
        sys.setprofile(previous)
    return outcome, frames


def _snapshot(namespace: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Each global's identity and, for data, its repr: a call that rebinds or mutates one shows."""
    out = {}
    for key, value in namespace.items():
        if key == "__builtins__":
            continue
        plain = callable(value) or type(value).__name__ == "module"
        out[key] = (id(value), "" if plain else repr(value))
    return out


def _changed(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _fresh_compile(op: Operator) -> tuple[Callable[..., Any] | None, str]:
    namespace: dict[str, Any] = {"__name__": "opgen.opscheck.standalone"}
    try:
        exec(compile(op.source, f"<opgen standalone {op.id}>", "exec"), namespace)
    except Exception as exc:
        return None, f"the source alone does not run: {type(exc).__name__}: {exc}"
    fn = namespace.get(op.id)
    if not callable(fn):
        return None, f"the source alone defines no function {op.id!r} (it relies on another source's names)"
    return fn, ""


class _Laws:
    """One operator's laws: each method checks one input (raising _Broken); :meth:`table` maps a law
    to its check, or to a str (the law's verdict without inputs: n/a, or why it cannot run)."""

    def __init__(self, op: Operator, recorded: list[tuple[tuple[Any, ...], tuple[str, str]]]):
        from opgen.score.static import MAX_RECURSION

        self.op = op
        self.recorded = recorded
        self.namespace: dict[str, Any] = getattr(op.fn, "__globals__", {})
        self.max_frames = MAX_RECURSION
        self.alone, self.not_alone = _fresh_compile(op)

    def table(self) -> dict[str, Any]:
        op = self.op
        return {
            "standalone": self.standalone if self.alone is not None else self.not_alone,
            "total": self.total, "deterministic": self.deterministic, "pure": self.pure,
            "out_len": NA if op.out_len is None else self.out_len,
            "recursion": self.recursion,
            "cost": NA if op.cost is None else self.cost,
        }

    def standalone(self, args: tuple[Any, ...]) -> None:
        assert self.alone is not None
        mine, theirs = _outcome(self.alone, args), _outcome(self.op.fn, args)
        if mine != theirs:
            raise _Broken(f"the source compiled alone gives {_shown(mine)}, the library's operator "
                          f"{_shown(theirs)}", args)

    def total(self, args: tuple[Any, ...]) -> None:
        out = _outcome(self.op.fn, args)
        if out[0] != "ok":
            raise _Broken(_shown(out) + " (an operator must return a str on its whole domain)", args)

    def deterministic(self, args: tuple[Any, ...]) -> None:
        first, second = _outcome(self.op.fn, args), _outcome(self.op.fn, args)
        if first != second:
            raise _Broken(f"two calls differ: {_shown(first)}, then {_shown(second)}", args)

    def pure(self, args: tuple[Any, ...]) -> None:
        before = _snapshot(self.namespace)
        _WATCH.events = []
        try:
            out = _outcome(self.op.fn, args)
        finally:
            io, _WATCH.events = _WATCH.events, None
        changed = _changed(before, _snapshot(self.namespace))
        if io:
            raise _Broken(f"the call did I/O (audit events {', '.join(sorted(set(io)))})", args)
        if changed:
            raise _Broken(f"the call changed global(s) {', '.join(changed)} of the operator's namespace", args)
        if len(self.recorded) < FRESH_INPUTS:
            self.recorded.append((args, out))

    def out_len(self, args: tuple[Any, ...]) -> None:
        assert self.op.out_len is not None
        out = _outcome(self.op.fn, args)
        if out[0] == "ok":
            want = self.op.out_len(len(args[0]), tuple(args[self.op.n_inputs:]))
            if len(out[1]) != want:
                raise _Broken(f"out_len says {want} characters, the output has {len(out[1])}: {out[1]!r}", args)

    def recursion(self, args: tuple[Any, ...]) -> None:
        out, frames = _measured(self.op, args)
        if out[0] == "raise" and out[1].startswith("RecursionError"):
            raise _Broken(f"{_shown(out)} (recursion past the limit of {call_recursion_limit()})", args)
        if frames.most > self.max_frames:
            raise _Broken(f"{frames.most} of the operator's frames on the stack at once, over the static "
                          f"grader's limit of {self.max_frames}", args)

    def cost(self, args: tuple[Any, ...]) -> None:
        assert self.op.cost is not None
        out, frames = _measured(self.op, args)
        if out[0] != "ok":
            return  # the total law reports it
        longest, _work, depth = self.op.cost(len(args[0]), args[1] if len(args) > 1 else None)
        if len(out[1]) > longest:
            raise _Broken(f"output of {len(out[1])} characters, over the cost bound's longest output {longest}", args)
        if frames.recursion > depth:
            raise _Broken(f"recursion {frames.recursion} deep, over the cost bound's depth {depth}", args)


def _run(op: Operator, law: str, check: Callable[[tuple[Any, ...]], None], examples: int, seed: int) -> LawResult:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed

    calls = [0]

    @settings(max_examples=examples, database=None, deadline=None, derandomize=False, print_blob=False,
              verbosity=Verbosity.quiet, report_multiple_bugs=False, phases=(Phase.generate, Phase.shrink),
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(_strategy(op))
    def prop(args: tuple[Any, ...]) -> None:
        calls[0] += 1
        check(args)

    try:
        prop()
    except _Broken as exc:
        return LawResult(op.id, law, BROKEN, calls[0], exc.message, exc.call_args, render_call(op.id, exc.call_args))
    except Exception as exc:
        inner = [e for e in getattr(exc, "exceptions", ()) if isinstance(e, _Broken)]  # Hypothesis's Flaky
        if inner:
            return LawResult(op.id, law, BROKEN, calls[0], inner[0].message + " (it did not repeat when replayed)",
                             inner[0].call_args, render_call(op.id, inner[0].call_args))
        # a law's own arithmetic failing on the operator's bound (a cost that raises, say)
        return LawResult(op.id, law, BROKEN, calls[0], f"checking it raised {type(exc).__name__}: {exc}")
    return LawResult(op.id, law, HELD, calls[0])


_CHILD = r"""
import json, sys
sys.setrecursionlimit(LIMIT)
out = {}
for item in json.load(sys.stdin):
    ns = {"__name__": "opgen.opscheck.fresh"}
    try:
        exec(compile(item["source"], "<fresh %s>" % item["id"], "exec"), ns)
        fn = ns[item["id"]]
    except BaseException as exc:
        out[item["id"]] = {"error": "%s: %s" % (type(exc).__name__, exc)}
        continue
    res = []
    for args in item["inputs"]:
        try:
            v = fn(*args)
        except Exception as exc:
            res.append(["raise", "%s: %s" % (type(exc).__name__, exc)])
            continue
        res.append(["ok", v] if isinstance(v, str) else ["value", "%s %r" % (type(v).__name__, v)])
    out[item["id"]] = {"outputs": res}
json.dump(out, sys.stdout)
"""  # LIMIT: call_recursion_limit()


def _fresh_process(items: list[tuple[Operator, list[tuple[tuple[Any, ...], tuple[str, str]]]]]) -> dict[str, Any]:
    request = [{"id": op.id, "source": op.source, "inputs": [list(a) for a, _ in rec]} for op, rec in items]
    child = _CHILD.replace("LIMIT", str(call_recursion_limit()))
    proc = subprocess.run([sys.executable, "-I", "-c", child], input=json.dumps(request), capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {op.id: {"error": f"the fresh process failed (exit {proc.returncode}): {tail}"} for op, _ in items}
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def _size(args: tuple[Any, ...]) -> tuple[int, str]:
    return sum(len(a) if isinstance(a, str) else abs(a) for a in args), repr(args)


def check(library: OperatorLibrary, examples: int = 100, seed: int = 0) -> Report:
    """Every law for every operator of ``library`` (:data:`LAWS`); raises :class:`MissingHypothesis`
    when hypothesis is not installed."""
    try:
        import hypothesis  # noqa: F401
    except ImportError as exc:
        raise MissingHypothesis(f"opgen ops check needs hypothesis (pip install 'opgen[{CHECK_EXTRA}]'): "
                                f"{exc}") from None
    return _check(library, examples, seed)


def _same(fresh: tuple[str, str], here: tuple[str, str]) -> bool:
    """The fresh process's outcome equals this one's (an exception: of the same type)."""
    if fresh[0] == here[0] == "raise":
        return fresh[1].split(":")[0] == here[1].split(":")[0]
    return fresh == here


def _check(library: OperatorLibrary, examples: int, seed: int) -> Report:
    _watch_io()
    results: dict[tuple[str, str], LawResult] = {}
    fresh_items = []
    for op in library.operators:
        recorded: list[tuple[tuple[Any, ...], tuple[str, str]]] = []
        for law, how in _Laws(op, recorded).table().items():
            if how == NA:
                results[op.id, law] = LawResult(op.id, law, NA)
            elif isinstance(how, str):
                results[op.id, law] = LawResult(op.id, law, BROKEN, 0, how)
            else:
                results[op.id, law] = _run(op, law, how, examples, seed)
        fresh_items.append((op, recorded))
    fresh = _fresh_process(fresh_items)
    for op, recorded in fresh_items:
        answer = fresh.get(op.id, {"error": "the fresh process did not answer"})
        if "error" in answer:
            if results[op.id, "standalone"].status == HELD:
                results[op.id, "standalone"] = LawResult(op.id, "standalone", BROKEN,
                                                         results[op.id, "standalone"].calls,
                                                         f"in a fresh python -I process: {answer['error']}")
            continue
        if results[op.id, "pure"].status != HELD or results[op.id, "standalone"].status != HELD:
            continue  # a source that does not run alone tells nothing about purity in a fresh process
        wrong = [(args, mine, tuple(theirs)) for (args, mine), theirs in zip(recorded, answer["outputs"])
                 if not _same(tuple(theirs), mine)]
        if wrong:
            args, mine, theirs = min(wrong, key=lambda w: _size(w[0]))
            results[op.id, "pure"] = LawResult(
                op.id, "pure", BROKEN, results[op.id, "pure"].calls,
                f"a fresh process gives {_shown(theirs)}, this one gave {_shown(mine)} "
                f"({len(wrong)} of {len(recorded)} replayed inputs differ)", args, render_call(op.id, args))
    ordered = tuple(results[op.id, law] for op in library.operators for law in LAWS)
    return Report(library.name, library.digest, len(library.operators), examples, seed, ordered)
