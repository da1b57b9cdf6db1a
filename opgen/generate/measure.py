"""Per-task measures every row carries (docs/formats.md, "extra_info"): calls that leave their
argument unchanged (degenerate rows, issue 18 item 6) and each parameterised call's distance from
its name to its own trailing argument (the study's func_24 drift metric, item 4).

Both are functions of the expression tree (and, for effects, of the input): no randomness, so
adding them changes no draw.
"""

from __future__ import annotations

from typing import Any

from opgen import expr as E
from opgen import ops

_Var, _Lit, _Call, _Concat, _Method = E.Var, E.Lit, E.Call, E.Concat, E.Method


def unchanged_calls(program: E.Expr, x: str, output: str | None = None) -> int:
    """How many operator calls return their first argument unchanged (``func_21`` on lowercase
    letters, ``func_2`` on a word without vowels): a model may skip such a call and still be right.

    ``output`` (the task's known output) spares the evaluation of a single call on leaves.
    """
    if type(program) is _Call and all(type(a) in (_Var, _Lit) for a in program.args):
        first: Any = program.args[0]  # a Var or a Lit
        arg = x if type(first) is _Var else first.value
        if output is None:
            output = E.evaluate(program, x)
        return int(output == arg)
    count = [0]
    fns = _FNS

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


_FNS = {op.id: op.fn for op in ops.OPERATORS}


def task_unchanged_calls(task) -> int:
    """:func:`unchanged_calls` of a task: the count its generator noted when drawing it
    (``tasks.with_unchanged``), else the walk."""
    known = task.__dict__.get("_unchanged")
    return unchanged_calls(task.program, task.input, task.output) if known is None else known


def call_distances(program: E.Expr) -> tuple[tuple[str, int, int], ...]:
    """``(op, chars, call_tails)`` per parameterised call in pre-order: the characters between the
    end of the call's name and the start of its own trailing argument, and how many other library
    calls' parameter tails lie in between (``expr.tail_distances``, as the probes measure them)."""
    out: list = []

    def rec(e: Any) -> tuple[str, int]:  # an E.Expr, dispatched on its exact type
        """(rendered text, parameterised calls inside) — the text as ``expr.render`` writes it."""
        t = type(e)
        if t is _Var:
            return e.name, 0
        if t is _Lit:
            return repr(e.value), 0
        if t is _Call:
            slot = len(out)
            if e.params:
                out.append(None)  # pre-order: this call before the calls inside it
            texts, inside = [], 0
            for a in e.args:
                text, n = rec(a)
                texts.append(text)
                inside += n
            params = [repr(p) for p in e.params]
            if e.params:
                between = "(" + ", ".join(texts) + ", " + ", ".join(params[:-1]) + (", " if len(params) > 1 else "")
                out[slot] = (e.op, len(between), inside)
            return f"{e.op}({', '.join(texts + params)})", inside + (1 if e.params else 0)
        if t is _Concat:
            left, nl = rec(e.left)
            right, nr = rec(e.right)
            return f"({left} + {right})", nl + nr
        inner, n = rec(e.expr)
        return f"({inner}).{e.name}()", n

    rec(program)
    return tuple(out)
