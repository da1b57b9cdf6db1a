"""Operators that misbehave while opgen runs them: a named error, never a hang or a silent exit.

An operator must return a ``str`` for every input of its domain, in bounded time, and leave the
process alone. A user's library may break that (docs/operators.md, "When an operator misbehaves").
While a :func:`watch` is on (``opgen build``, its workers, ``opgen ops check``):

- **a call that runs past the budget** (``budget_s`` wall-clock seconds for one call) is stopped by
  raising :class:`OverBudget` inside it. A SIGALRM ticks four times a budget on the main thread and
  looks at the stack: the outermost frame of an operator's own code that is the same frame object
  as at earlier ticks has been running since it was first seen. Nothing is paid per call. A call
  that swallows ``OverBudget`` and runs on for another budget ends the process with a message naming
  it (exit status :data:`EXIT_STUCK`): no other way to stop it is left.
- **os._exit from an operator** raises :class:`OperatorExit` instead of ending the process
  (``os._exit`` and ``posix._exit`` are wrapped while the watch is on; called from anything that is
  not an operator, they exit as ever).
- **SIGINT** raises :class:`Interrupted`, a ``KeyboardInterrupt``, so a ``KeyboardInterrupt`` an
  operator raises itself is told apart from a Ctrl-C. An operator call still running a tick after a
  SIGINT or SIGTERM (it swallowed the exception the signal raised) ends the process with 130 or 143.

Naming the culprit (:func:`name_fault`): when a block that runs operators fails, the caller replays
it under :func:`replay`, a profiler that records each operator call's arguments as the call starts
and checks what it returns. That names the operator and its exact input, including an operator that
returned a non-str: that breaks its caller later, outside any operator frame, so only the replay
sees it. The rows are a pure function of their index, so the replay makes the same calls.
"""

from __future__ import annotations

import contextlib
import opcode
import os
import posix
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import CodeType, FrameType
from typing import Any, NoReturn

from opgen.choices import OP_BUDGET_S
from opgen.errors import OpgenError
from opgen.outdir import Terminated

EXIT_STUCK = 86  # the status of a process ended by a call that ran past its budget and would not stop
_TICKS = 4  # watchdog ticks per budget
_SHOWN = 200  # characters of one argument's repr in a message
_REAL_EXIT = os._exit


class OperatorFault(RuntimeError, OpgenError):
    """An operator broke its contract while opgen ran it: the message names the operator, its
    input and what it did; ``where`` names the split and row when the caller knows them."""

    exit_code = 1

    def __init__(self, op_id: str, call: str, what: str, library: str = "", where: str = ""):
        self.op_id, self.call, self.what, self.library, self.where = op_id, call, what, library, where
        lib = f" of library {library!r}" if library else ""
        super().__init__(f"{where + ': ' if where else ''}operator {op_id!r}{lib}: {call} {what}; an operator "
                         f"must return a str for every input of its domain, within the per-call budget, and "
                         f"leave the process alone (opgen ops check tests a library for this)")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses from a worker process to the building one
        return (OperatorFault, (self.op_id, self.call, self.what, self.library, self.where))

    def at(self, where: str) -> OperatorFault:
        return OperatorFault(self.op_id, self.call, self.what, self.library, where)


class Stopped(BaseException):
    """An operator call the watch stopped (not an Exception: the operator's own ``except Exception``
    must not swallow it); ``what`` it did, as an :class:`OperatorFault` says it."""

    def __init__(self, op_id: str, call: str, what: str):
        super().__init__(op_id, call, what)
        self.op_id, self.call, self.what = op_id, call, what


class OverBudget(Stopped):
    """Raised inside an operator call that ran past the budget."""


class OperatorExit(Stopped):
    """``os._exit(code)`` called by an operator while a watch is on."""


class Interrupted(KeyboardInterrupt):
    """A SIGINT while a watch is on (a Ctrl-C, not an operator's own ``raise KeyboardInterrupt``)."""


def budget_text(seconds: float) -> str:
    return f"{seconds:g} s"


def render_call(op_id: str, args: tuple[Any, ...] | list[Any]) -> str:
    """``op(arg, ...)`` with each argument's repr, long ones cut (e.g. ``rev('abc')``)."""
    shown = []
    for a in args:
        text = repr(a)
        shown.append(text if len(text) <= _SHOWN else f"{text[:_SHOWN]}...<{len(text):,} characters>")
    return f"{op_id}({', '.join(shown)})"


def describe(exc: BaseException) -> str:
    """What an operator that raised ``exc`` did, as a message says it."""
    if isinstance(exc, Stopped):
        return exc.what
    text = str(exc)
    return f"raised {type(exc).__name__}" + (f": {text}" if text else "")


Codes = Mapping[CodeType, str]  # an operator's code object -> its id


def codes_of(library: Any, extra: Mapping[str, Any] | None = None) -> dict[CodeType, str]:
    """The code objects of ``library``'s operators (and of ``extra``: id -> function), by id."""
    codes = {op.fn.__code__: op.id for op in library.operators if hasattr(op.fn, "__code__")}
    for op_id, fn in (extra or {}).items():
        if hasattr(fn, "__code__"):
            codes[fn.__code__] = op_id
    return codes


def _outermost(frame: FrameType | None, codes: Codes) -> FrameType | None:
    found = None
    while frame is not None:
        if frame.f_code in codes:
            found = frame
        frame = frame.f_back
    return found


def _args(frame: FrameType) -> tuple[Any, ...]:
    """A call's arguments as its frame holds them now (the replay records them as the call starts)."""
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    values = frame.f_locals
    return tuple(values.get(n) for n in names)


def _as_call(frame: FrameType, codes: Codes) -> tuple[str, str]:
    op_id = codes[frame.f_code]
    return op_id, render_call(op_id, _args(frame))


# ---------------------------------------------------------------- the watch


class Watch:
    """See the module's docstring; one is on at a time per process (:func:`watch`)."""

    def __init__(self, codes: Codes, budget_s: float = OP_BUDGET_S):
        self.codes = dict(codes)
        self.budget_s = budget_s
        self._frame: FrameType | None = None  # the operator call seen running at the last tick
        self._since = 0.0
        self._stopped_at: float | None = None  # when OverBudget was raised in it
        self._signalled: tuple[int, float] | None = None  # a SIGINT/SIGTERM that came, and when
        self._handlers: dict[int, tuple[Any, Any]] = {}  # signal -> (the handler before, this watch's)
        self._exits: tuple[Any, Any] | None = None  # os._exit, posix._exit while this watch replaces them

    # the process-wide parts: SIGALRM, SIGINT, SIGTERM, os._exit
    def start(self) -> None:
        if threading.current_thread() is threading.main_thread():
            if self.budget_s > 0 and hasattr(signal, "setitimer"):
                self._handle(signal.SIGALRM, self._tick)
                self.arm()
            for sig in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(sig)
                if handler is signal.default_int_handler:
                    handler = _interrupted
                if callable(handler):
                    self._handle(sig, self._noted(handler))
        self._exits = (os._exit, posix._exit)
        os._exit = posix._exit = self._exit

    def _handle(self, sig: int, handler: Callable[[int, FrameType | None], Any]) -> None:
        self._handlers[sig] = (signal.signal(sig, handler), handler)

    def arm(self) -> None:
        """Start the ticks (again in a forked child: timers are not inherited)."""
        if signal.SIGALRM in self._handlers:
            tick = self.budget_s / _TICKS
            signal.setitimer(signal.ITIMER_REAL, tick, tick)

    def stop(self) -> None:
        if signal.SIGALRM in self._handlers:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, (previous, mine) in self._handlers.items():
            if signal.getsignal(sig) is mine:  # not one a handler set since (SIGTERM's ignores a second one)
                signal.signal(sig, previous)
        self._handlers.clear()
        if self._exits is not None:
            os._exit, posix._exit = self._exits
            self._exits = None
        self._frame = None

    def _noted(self, handler: Callable[[int, FrameType | None], Any]) -> Callable[[int, FrameType | None], Any]:
        def noted(signum: int, frame: FrameType | None) -> Any:
            self._signalled = (signum, time.monotonic())
            return handler(signum, frame)

        return noted

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        call = _outermost(frame, self.codes)
        now = time.monotonic()
        if call is not None and self._signalled is not None and now - self._signalled[1] >= self.budget_s / _TICKS:
            sig = self._signalled[0]
            op_id, shown = _as_call(call, self.codes)
            self._end(f"{signal.Signals(sig).name} came while operator {op_id!r} ran {shown}, and it did not stop",
                      128 + sig)
        if call is None or call is not self._frame:
            self._frame, self._since, self._stopped_at = call, now, None
            return
        past = f"ran past the per-call budget of {budget_text(self.budget_s)}"
        if self._stopped_at is None:
            if now - self._since >= self.budget_s:
                self._stopped_at = now
                raise OverBudget(*_as_call(call, self.codes), past)
        elif now - self._stopped_at >= self.budget_s:  # it swallowed OverBudget and ran on
            op_id, shown = _as_call(call, self.codes)
            self._end(f"operator {op_id!r}: {shown} {past} and did not stop when interrupted", EXIT_STUCK)

    @staticmethod
    def _end(why: str, status: int) -> NoReturn:
        """The one way left to stop an operator that swallows what stops it: end the process."""
        sys.stderr.write(f"opgen: {why}; ending process {os.getpid()} (exit status {status})\n")
        sys.stderr.flush()
        _REAL_EXIT(status)

    def _exit(self, status: int) -> NoReturn:
        call = _outermost(sys._getframe(1), self.codes)
        if call is None:
            _REAL_EXIT(status)
        raise OperatorExit(*_as_call(call, self.codes), f"called os._exit({status})")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


_ACTIVE: list[Watch] = []  # the watch that is on in this process (the last one started)


@contextlib.contextmanager
def watch(codes: Codes, budget_s: float = OP_BUDGET_S) -> Iterator[Watch]:
    """Watch the operators ``codes`` while the block runs (main thread: the budget and SIGINT; any
    thread: os._exit). A watch started inside another replaces it until the block ends."""
    outer = _ACTIVE[-1] if _ACTIVE else None
    if outer is not None:
        outer.stop()
    w = Watch(codes, budget_s)
    w.start()
    _ACTIVE.append(w)
    try:
        yield w
    finally:
        _ACTIVE.pop()
        w.stop()
        if outer is not None:
            outer.start()


def in_child() -> None:
    """In a forked worker: the watch it inherited ticks again (a fork does not inherit timers)."""
    if _ACTIVE:
        _ACTIVE[-1].arm()


# ---------------------------------------------------------------- naming the culprit


class _Found(BaseException):
    def __init__(self, fault: OperatorFault):
        super().__init__(fault)
        self.fault = fault


class _Replay:
    """A profiler: each operator call's arguments as it starts; a non-str it returns stops the replay."""

    def __init__(self, codes: Codes, library: str):
        self.codes, self.library = codes, library
        self.calls: dict[FrameType, tuple[str, tuple[Any, ...]]] = {}
        self.failed: tuple[FrameType, str, tuple[Any, ...]] | None = None  # the outermost call that raised

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            op_id = self.codes.get(frame.f_code)
            if op_id is not None:
                self.calls[frame] = (op_id, _args(frame))
        elif event == "return" and frame in self.calls:
            op_id, args = self.calls.pop(frame)
            if _returned(frame):
                if not isinstance(arg, str):
                    raise _Found(OperatorFault(op_id, render_call(op_id, args),
                                               f"returned {type(arg).__name__} {_clip(repr(arg))}, not a str",
                                               self.library))
            else:  # an exception leaves it; an outer operator call that it leaves later replaces it
                self.failed = (frame, op_id, args)


def _returned(frame: FrameType) -> bool:
    """The frame ends at a return (a profiler's "return" event is also sent when an exception leaves it)."""
    code = frame.f_code.co_code
    at = frame.f_lasti
    return 0 <= at < len(code) and code[at] in _RETURNS


_RETURNS = frozenset(op for name, op in opcode.opmap.items() if name.startswith("RETURN_"))


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _through(exc: BaseException, frame: FrameType) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame is frame:
            return True
        tb = tb.tb_next
    return False


def replay(run: Callable[[], object], codes: Codes, library: str = "") -> OperatorFault | None:
    """Run ``run`` under the profiler; the operator call that misbehaved in it, or None."""
    rec = _Replay(codes, library)
    previous = sys.getprofile()
    sys.setprofile(rec)
    try:
        run()
    except _Found as found:
        return found.fault
    except BaseException as exc:
        if _is_signal(exc) or rec.failed is None or not _through(exc, rec.failed[0]):
            return None
        _, op_id, args = rec.failed
        return OperatorFault(op_id, render_call(op_id, args), describe(exc), library)
    finally:
        sys.setprofile(previous)
    return None


def _is_signal(exc: BaseException) -> bool:
    return isinstance(exc, (Interrupted, Terminated))


def name_fault(exc: BaseException, codes: Codes, run_again: Callable[[], object],
               library: str = "") -> OperatorFault | None:
    """The operator call behind ``exc`` (raised by a block that runs operators), found by running the
    block again (``run_again``) under :func:`replay`; None when ``exc`` is not an operator's doing
    (opgen's own errors, signals, a bug elsewhere), and the caller re-raises it."""
    if isinstance(exc, OpgenError) or _is_signal(exc):
        return None
    # A BaseException that no operator raised is a signal or the process ending: not replayed.
    if not isinstance(exc, Exception) and not isinstance(exc, Stopped):
        tb, through = exc.__traceback__, False
        while tb is not None and not through:
            through = tb.tb_frame.f_code in codes
            tb = tb.tb_next
        if not through:
            return None
    fault = replay(run_again, codes, library)
    if fault is None and isinstance(exc, Stopped):
        # not repeated (an operator that is not deterministic): what the watch saw, arguments as the frame held them
        fault = OperatorFault(exc.op_id, exc.call, exc.what, library)
    return fault
