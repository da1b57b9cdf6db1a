"""The child: forked by the zygote for one request; the model's code runs here (hostile from its
first line on).

Trusted until the last line of :func:`main`: it reads its request, applies the jail's per-child
steps (``steps.IN_CHILD``: limits, uid, capabilities, its own seccomp filter), then drops every
reference to the worker's state — the jail, and every module the worker's own modules hold — and
hands over to the harness: :func:`run_calls` and its helpers rebuilt on a globals dict of their own
(builtins, the two pipes as file objects, the builtins it calls bound there: a program may replace
``builtins.len``), which writes one frame per result on the result pipe (wire.py's child frames).
Standard library only (see the package's docstring).
"""

from __future__ import annotations

import builtins
import io
import marshal
import os
import re
import sys

from . import wire
from .base import Jail
from .wire import CHILD_DETAIL_CAP, CODES, END_CODE, FRAME_HEADER, detail_of

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from typing import Any

# A child's recursion limit: the library's recursive operators recurse once per character (its one
# home: `opgen ops check` checks operators under it, opgen.opscheck reads it from here).
CHILD_RECURSION_LIMIT = 20_000
_ARITY = re.compile(r"positional argument|required (keyword-only )?argument|unexpected keyword argument|"
                    r"takes no arguments")


class ChildRequest:
    """What the worker writes on the request pipe and the child reads itself (the zygote never
    holds a request's bytes): the flat call position to start from (after a child that timed out
    or crashed, its successor goes on at the next call), the working directory, the CPU seconds
    left of the response's budget, and the units (wire.Request's)."""

    __slots__ = ("start", "workdir", "cpu_s", "units")

    def __init__(self, start: int, workdir: str, cpu_s: int, units: list) -> None:
        self.start, self.workdir, self.cpu_s, self.units = start, workdir, cpu_s, units

    def to_wire(self) -> tuple:
        return (self.start, self.workdir, self.cpu_s, self.units)

    @classmethod
    def from_wire(cls, wire: tuple) -> ChildRequest:
        start, workdir, cpu_s, units = wire
        return cls(start, workdir, cpu_s, units)


# ------------------------------------------------------------------ the harness (runs with model code)

# The harness's own globals (set on its dict, see harness()); defined here for readers and type checkers.
_PID = 0
_OUT: Any = None
_IDLE: Any = None


def classify(exc: BaseException) -> tuple[str, str]:
    """An exception's status and detail, as a child reports them (the static path's too)."""
    text = detail_of(exc)
    if isinstance(exc, MemoryError):
        return "memory", text
    if type(exc) is NameError:
        return "missing_name", text
    if isinstance(exc, TypeError) and _ARITY.search(text):
        return "arity", text
    return "exception", text


def _loads(code: object) -> Any:  # the harness's: everything was unmarshalled before model code
    raise ValueError("bad marshal data")


def send(status: str, payload: str) -> None:
    # Harness globals (harness()): the result pipe as a file object (no module function: a module
    # function's __self__ would be the module), this child's pid in its own namespace.
    data = str.encode(payload, "utf-8", "surrogatepass")
    view = memoryview(FRAME_HEADER.pack(CODES[status], _PID, len(data)) + data)
    while view:
        view = view[_OUT.write(view):]


def run_calls(units: list, start: int, max_output: int) -> None:  # noqa: C901
    """Run calls from flat position ``start`` on, sending one frame per call (and one per loaded unit)."""
    position = 0
    for unit_index, (code, calls, _fail_fast) in enumerate(units):
        if position + len(calls) <= start:
            position += len(calls)
            continue
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        try:
            # The scorer compiles (where the compiler's memory is already paged in) and the child
            # unmarshals before its model code runs (main): one code object, or its top-level
            # blocks to run in order. Source text only when compiling there hit a limit (compiled
            # here as there: postponed annotations, this module's future, and never optimised);
            # bytes only when they would not unmarshal (this child then fails as it would have).
            kind = type(code)
            compiled = (compile(code, "<answer>", "exec", optimize=0) if kind is str
                        else _loads(code) if kind is bytes else code)
            if type(compiled) is list:  # [prelude, source text]: the scorer compiled only its prelude
                compiled = tuple(compile(b, "<answer>", "exec", optimize=0) if type(b) is str
                                 else _loads(b) if type(b) is bytes else b for b in compiled)
        except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
            status, detail = classify(exc)
            if isinstance(exc, (SyntaxError, ValueError)):
                status = "syntax"
            for _ in range(max(start - position, 0), len(calls)):
                send(status, detail)
            position += len(calls)
            continue
        try:
            if type(compiled) is tuple:
                for block in compiled:
                    exec(block, namespace)
            else:
                exec(compiled, namespace)
        except BaseException as exc:
            status, detail = classify(exc)
            for _ in range(max(start - position, 0), len(calls)):
                send(status, "while defining: " + detail)
            position += len(calls)
            continue
        send("loaded", str(unit_index))
        for i, (entry, args) in enumerate(calls):
            if position + i < start:
                continue
            fn = namespace.get(entry)
            if fn is None:
                send("missing_name", f"{entry} is not defined")
                continue
            try:
                value = fn(*args)
            except BaseException as exc:
                send(*classify(exc))
                continue
            if not isinstance(value, str):
                send("not_a_string", f"returned {type(value).__name__}")
                continue
            # str methods through the base class: a subclass may lie in __len__ or encode().
            if str.__len__(value) > max_output:
                send("output_too_large", f"{str.__len__(value)} characters > {max_output}")
                continue
            send("ok", str.__str__(value))
        position += len(calls)




def harness_main(units: list, start: int, max_output: int) -> None:
    run_calls(units, start, max_output)
    _OUT.write(FRAME_HEADER.pack(END_CODE, _PID, 0))
    while True:  # the worker has every result and kills this child; until then it waits
        _IDLE.read(1)


def harness(res_fd: int, req_fd: int) -> dict:
    """The globals model code's harness runs with (made by the zygote, once): no module but builtins,
    no worker function (:func:`run_calls` and its helpers are rebuilt on this dict), the builtins
    the harness uses bound here (a program may replace ``builtins.len``), the pipes as file objects."""
    h: dict = {"__builtins__": builtins, "builtins": builtins, "CODES": dict(CODES), "FRAME_HEADER": FRAME_HEADER,
               "END_CODE": END_CODE, "_ARITY": _ARITY, "CHILD_DETAIL_CAP": CHILD_DETAIL_CAP, "_PID": 0,
               "_OUT": io.FileIO(res_fd, "wb", closefd=False), "_IDLE": io.FileIO(req_fd, "rb", closefd=False),
               "len": len, "isinstance": isinstance, "type": type, "enumerate": enumerate, "range": range,
               "max": max, "str": str, "bytes": bytes, "memoryview": memoryview, "compile": compile, "exec": exec,
               "tuple": tuple}
    make: Any = type(harness)  # types.FunctionType
    for fn in (send, classify, detail_of, run_calls, _loads, harness_main):
        h[fn.__name__] = make(fn.__code__, h, fn.__name__, fn.__defaults__)
    return h


# ------------------------------------------------------------------ the child's start (trusted)


def _unmarshalled(code: object) -> object:
    # The scorer's own marshal output (trusted, like the rest of the request); left as it is when
    # it will not load, so that the child reports the failure as it always did.
    if type(code) is not bytes:
        return code
    try:
        return marshal.loads(code)
    except Exception:
        return code


def _reaches_a_module(value: object) -> bool:
    """A module, a function bound to one (its ``__self__``), or the jail (ctypes' functions)."""
    return (type(value) is type(sys) or type(getattr(value, "__self__", None)) is type(sys)
            or isinstance(value, Jail))


def own_modules() -> list[dict]:
    """The globals of the worker's own modules (this package's and the script's), taken by the
    zygote before the import allowlist empties ``sys.modules``: each child empties them of modules."""
    package = __name__.rpartition(".")[0]
    return [vars(m) for n, m in list(sys.modules.items())
            if n == "__main__" or n == package or n.startswith(package + ".")]


def main(start: list) -> None:
    """The child, its stack unwound to the script's top (``start``: the one-item list the zygote's
    :class:`ChildStart` carried, emptied here). Trusted until the last line: read the request,
    enter the jail, then run model code with nothing of the worker left reachable."""
    jail, req, res, fresh, harness_globals, own = start.pop()
    try:
        os.setsid()
        try:
            request = ChildRequest.from_wire(wire.receive(req))
        except EOFError:
            os._exit(112)
        low, high = min(req, res), max(req, res)
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)
        os.chdir(request.workdir)
        me = 1 if fresh else os.getpid()
        for step in jail.in_child:
            if not step(jail, me, request.cpu_s):
                os._exit(111)  # never run model code outside the jail the worker reported
        sys.setrecursionlimit(CHILD_RECURSION_LIMIT)
        units = [(_unmarshalled(code), calls, fail_fast) for code, calls, fail_fast in request.units]
        first, max_output, lock = request.start, jail.limits["max_output"], jail.lock_imports
        harness_globals["_PID"] = me
        run = harness_globals["harness_main"]
    except BaseException:
        os._exit(113)
    del jail, request, harness_globals, step, low, high, start
    if lock:
        # Out of reach from here on: every module the worker's modules hold (os, marshal, signal...),
        # the module functions bound there (marshal.loads) and the jail (ctypes' functions). What is
        # left (their functions, constants) calls nothing without them. Popping the names, not
        # clearing the dicts: freeing the modules' functions would write to (copy) their pages.
        # (Every name found first: this module's own globals are among those emptied.)
        doomed = [(space, name) for space in own for name, value in space.items() if _reaches_a_module(value)]
        for space, name in doomed:
            del space[name]
        del doomed, space, name
    del own
    run(units, first, max_output)
