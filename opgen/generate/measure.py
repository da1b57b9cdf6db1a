"""Per-task measures every row carries (docs/formats.md, "extra_info"): calls that leave their
argument unchanged (degenerate rows, issue 18 item 6) and each parameterised call's distance from
its name to its own trailing argument (the study's func_24 drift metric, item 4).

Both are functions of the expression tree (and, for effects, of the input): no randomness, so
adding them changes no draw.
"""

from __future__ import annotations

from typing import Any

from opgen import expr
from opgen.ops import STUDY, OperatorLibrary

_Var, _Lit, _Call, _Concat, _Method = expr.Var, expr.Lit, expr.Call, expr.Concat, expr.Method


def unchanged_calls(program: expr.Expr, x: str, output: str | None = None, lib: OperatorLibrary = STUDY) -> int:
    """How many operator calls return their first argument unchanged (``func_21`` on lowercase
    letters, ``func_2`` on a word without vowels): a model may skip such a call and still be right.

    ``output`` (the task's known output) spares the evaluation of a single call on leaves;
    ``lib``: the operator library.
    """
    if type(program) is _Call and all(type(a) in (_Var, _Lit) for a in program.args):
        first: Any = program.args[0]  # a Var or a Lit
        arg = x if type(first) is _Var else first.value
        if output is None:
            output = expr.evaluate(program, x, None, lib)
        return int(output == arg)
    count = [0]
    fns = lib.functions

    def walk(e: Any) -> str:  # an E.Expr, dispatched on its exact type (mypy cannot narrow through t)
        t = type(e)
        if t is _Var:
            return x
        if t is _Lit:
            return e.value
        if t is _Call:
            args = [walk(a) for a in e.args]
            value = fns[e.op](*args, *e.params)
            if value == args[0]:
                count[0] += 1
            return value
        if t is _Concat:
            return walk(e.left) + walk(e.right)
        return getattr(walk(e.expr), e.name)()

    # The tree was evaluated when it was drawn (within the output cap), so this walk is safe; a
    # caller with very deep trees runs it under expr.recursion_headroom, as the builder does.
    walk(program)
    return count[0]


def task_unchanged_calls(task, lib: OperatorLibrary = STUDY) -> int:
    """:func:`unchanged_calls` of a task: the count its generator noted when drawing it
    (``tasks.with_unchanged``), else the walk."""
    known = task.__dict__.get("_unchanged")
    return unchanged_calls(task.program, task.input, task.output, lib) if known is None else known


def call_distances(program: expr.Expr) -> tuple[tuple[str, int, int], ...]:
    """``(op, chars, call_tails)`` per parameterised call in pre-order: the characters between the
    end of the call's name and the start of its own trailing argument, and how many other library
    calls' parameter tails lie in between (``expr.tail_distances``, as the probes measure them;
    tests/test_fidelity.py ties the two)."""
    return scan_measured(program, {})[2]


def scan_measured(e: Any, seen: dict[str, None]) -> tuple[str, int, tuple[tuple[str, int, int], ...]]:
    """``formats.scan(e, seen)`` and ``call_distances(e)`` in one walk: ``(text, depth, distances)``.

    The builder needs a distinct program's text, depth and per-call distances; walking the tree
    once instead of twice (both walks render every node) is a fifth of a chain row's time. The
    references are ``formats.scan`` and ``expr.tail_distances``; tests/test_fidelity.py ties the three.
    """
    out: list = []

    def rec(e: Any) -> tuple[str, int, int]:  # (text, depth, parameterised calls inside)
        t = type(e)
        if t is _Var:
            return e.name, 0, 0
        if t is _Lit:
            return repr(e.value), 0, 0
        if t is _Call:
            seen.setdefault(e.op, None)
            if len(e.args) == 1 and not e.params:
                inner, d, n = rec(e.args[0])
                return f"{e.op}({inner})", d + 1, n
            slot = len(out)
            if e.params:
                out.append(None)  # pre-order: this call before the calls inside it
            texts, d, inside = [], 0, 0
            for a in e.args:
                text, da, n = rec(a)
                texts.append(text)
                inside += n
                if da > d:
                    d = da
            if not e.params:
                return f"{e.op}({', '.join(texts)})", d + 1, inside
            args = ", ".join(texts)
            params = [repr(p) for p in e.params]
            # len("(" + args + ", " + ", ".join(params[:-1]) + (", " if len(params) > 1 else ""))
            out[slot] = (e.op, 3 + len(args) + (len(", ".join(params[:-1])) + 2 if len(params) > 1 else 0), inside)
            return f"{e.op}({args}, {', '.join(params)})", d + 1, inside + 1
        if t is _Concat:
            left, dl, nl = rec(e.left)
            right, dr, nr = rec(e.right)
            return f"({left} + {right})", max(dl, dr) + 1, nl + nr
        inner, d, n = rec(e.expr)
        return f"({inner}).{e.name}()", d + 1, n

    text, depth, _ = rec(e)
    return text, depth, tuple(out)
