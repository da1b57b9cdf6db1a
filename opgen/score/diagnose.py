"""Why a program failed: is each recalled definition the true operator, another one's body, or broken?

A recalled definition is compared *behaviourally*: it runs (in the sandbox) on a fixed set of probe
inputs and parameters, and its outputs are compared, here in the scorer, with the outputs of all
25 true operators on the same probes. Outcomes per recall block:

- ``correct``     behaves as the named operator on every probe;
- ``chimera``     behaves as another operator (``chimera_of``): the right name with a wrong body;
- ``arity``       takes a different number of parameters than the operator (``def func_24(s):``);
                  ``chimera_of`` is still filled when it behaves as an operator of that arity;
- ``wrong_body``  right arity, but no operator's behaviour;
- ``no_definition`` / ``syntax``  the block defines no function of that name / does not parse.
Per row: ``missing`` (an operator the program uses with no recall block), ``duplicated`` (a
second block for the same operator), ``extra`` (a block for an operator the program does not use).
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache

from opgen import expr as E
from opgen import ops
from opgen.score.parse import Recall
from opgen.score.sandbox import Result, Unit

PROBE_INPUTS = ("", "a", "Hello World", "racecar", "abcab", "AEIOU xyz", "a1b2!c", "zzyyx q", "The quick brown fox")
PROBE_INTS = (1, 2, 3)
PROBE_STRS = ("-", "ab", "xyz")
PROBE_PAIRS = (("abc", "xy"), ("", "hello"), ("Hi there", "QR"), ("aeiou", "12345"))

RECALL_CLASSES = ("correct", "chimera", "arity", "wrong_body", "no_definition", "syntax")


def _param_kind(op: ops.Operator) -> str:
    if op.n_inputs == 2:
        return "s1,s2"
    if not op.params:
        return "s"
    return "s,int" if op.params[0].kind == "int" else "s,str"


@cache
def probe_args(kind: str) -> tuple[tuple, ...]:
    """The fixed probe argument tuples of a signature kind (shared by every operator of that kind)."""
    if kind == "s":
        return tuple((s,) for s in PROBE_INPUTS)
    if kind == "s,int":
        return tuple((s, n) for s in PROBE_INPUTS for n in PROBE_INTS)
    if kind == "s,str":
        return tuple((s, p) for s in PROBE_INPUTS for p in PROBE_STRS)
    return PROBE_PAIRS


KINDS_BY_ARITY = {1: ("s",), 2: ("s,int", "s,str", "s1,s2")}


@cache
def true_outputs(op_id: str) -> tuple[str | None, ...]:
    """The true operator's outputs on its kind's probes (None where it raises), computed in-process:
    this is the library's own code, not a model's."""
    op = ops.get(op_id)
    out = []
    with E.recursion_headroom():
        for args in probe_args(_param_kind(op)):
            try:
                out.append(op.fn(*args))
            except Exception:
                out.append(None)
    return tuple(out)


@cache
def ops_of_kind(kind: str) -> tuple[str, ...]:
    return tuple(op.id for op in ops.OPERATORS if _param_kind(op) == kind)


@dataclass
class RecallCheck:
    """What the scorer will run for one recall block, and what it concluded."""

    op: str
    code: str | None
    arity_range: tuple[int, int] | None = None  # (min, max) positional parameters of the definition
    kinds: tuple[str, ...] = ()  # probe kinds to run
    verdict: str = ""
    chimera_of: str = ""
    detail: str = ""

    def unit(self) -> Unit | None:
        if not self.kinds:
            return None
        return Unit(self.code or "", tuple((self.op, args) for k in self.kinds for args in probe_args(k)),
                    fail_fast=True)


def _signature(code: str, name: str) -> tuple[int, int] | None | str:
    """(min, max) positional parameters of ``def name`` in ``code``; None if absent; "syntax" if unparsable."""
    try:
        module = E.parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "syntax"
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            n = len(a.posonlyargs) + len(a.args)
            return (n - len(a.defaults), 10**6 if a.vararg else n)
    return None


# Verdicts by (operator, exact block text). Models recall the same definitions verbatim over and
# over; a text's verdict is a function of the text (probes are fixed), so it is computed once per
# run and the block's probes are not re-executed. A nondeterministic definition keeps its first verdict.
_VERDICTS: dict[tuple[str, str], tuple[str, str, str, tuple[int, int] | None]] = {}
_VERDICTS_LOCK = threading.Lock()
VERDICT_CACHE_SIZE = 1 << 16


def _remember(check: RecallCheck) -> RecallCheck:
    if check.code is not None:
        with _VERDICTS_LOCK:
            if len(_VERDICTS) >= VERDICT_CACHE_SIZE:
                _VERDICTS.pop(next(iter(_VERDICTS)))
            _VERDICTS[(check.op, check.code)] = (check.verdict, check.chimera_of, check.detail, check.arity_range)
    return check


def plan(recall: Recall) -> RecallCheck:
    """Static checks of one recall block, and the probe runs it needs when they pass (none when the
    same text was judged before)."""
    check = RecallCheck(recall.op, recall.code)
    known = _VERDICTS.get((recall.op, recall.code)) if recall.code is not None else None
    if known is not None:
        check.verdict, check.chimera_of, check.detail, check.arity_range = known
        return check
    try:
        op = ops.get(recall.op)
    except ops.UnknownOperator:
        check.verdict, check.detail = "no_definition", f"{recall.op} is not a library operator"
        return check
    if recall.code is None:
        check.verdict, check.detail = "no_definition", "no code block after the recall header"
        return check
    sig = _signature(recall.code, op.id)
    if sig == "syntax":
        check.verdict, check.detail = "syntax", "the block does not parse"
        return _remember(check)
    if sig is None:
        check.verdict, check.detail = "no_definition", f"the block does not define {op.id}"
        return _remember(check)
    check.arity_range = sig
    lo, hi = sig
    own = _param_kind(op)
    kinds = [own] if lo <= op.arity <= hi else []
    kinds += [k for a, ks in KINDS_BY_ARITY.items() if lo <= a <= hi for k in ks if k != own]
    check.kinds = tuple(kinds)
    if not kinds:
        check.verdict, check.detail = "arity", f"takes {lo}..{hi} parameters, {op.id} takes {op.arity}"
        return _remember(check)
    return check


def conclude(check: RecallCheck, results: Sequence[Result]) -> RecallCheck:
    """Compare the probe results with every true operator's outputs; set the verdict."""
    got: dict[str, tuple] = {}
    i = 0
    for kind in check.kinds:
        n = len(probe_args(kind))
        got[kind] = tuple(r.value if r.ok else None for r in results[i:i + n])
        i += n
    op = ops.get(check.op)
    own = _param_kind(op)
    lo, hi = check.arity_range or (0, 0)
    arity_ok = lo <= op.arity <= hi
    if arity_ok and got.get(own) == true_outputs(op.id):
        check.verdict = "correct"
        return _remember(check)
    # The first operator (library order) whose every probe output the definition reproduces.
    for kind in check.kinds:
        for other in ops_of_kind(kind):
            if other != op.id and got[kind] == true_outputs(other):
                check.chimera_of = other
                break
        if check.chimera_of:
            break
    if not arity_ok:
        check.verdict = "arity"
        check.detail = f"takes {lo}..{hi} parameters, {op.id} takes {op.arity}"
    elif check.chimera_of:
        check.verdict, check.detail = "chimera", f"behaves as {check.chimera_of}"
    else:
        check.verdict = "wrong_body"
        failed = [r for r in results if not r.ok]
        check.detail = failed[0].detail if failed else "differs from the operator on the probes"
    return _remember(check)


@dataclass
class RecallReport:
    checks: list[RecallCheck] = field(default_factory=list)
    expected: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    duplicated: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        c = {k: 0 for k in RECALL_CLASSES}
        for check in self.checks:
            c[check.verdict] += 1
        return {"expected": len(self.expected), **c, "missing": len(self.missing),
                "duplicated": len(self.duplicated), "extra": len(self.extra)}


def recall_plan(recalls: Sequence[Recall], expected: Sequence[str]) -> RecallReport:
    """One check per first block of each expected operator; the rest are counted as duplicates/extras."""
    report = RecallReport(expected=tuple(expected))
    seen: dict[str, int] = {}
    for r in recalls:
        seen[r.op] = seen.get(r.op, 0) + 1
        if r.op in expected and seen[r.op] == 1:
            report.checks.append(plan(r))
    report.missing = tuple(op for op in expected if op not in seen)
    report.duplicated = tuple(op for op, n in seen.items() if n > 1)
    report.extra = tuple(op for op in seen if op not in expected)
    return report


def _entry_source(code: str, entry: str) -> str | None:
    """The text of the last top-level ``def entry`` (the one Python would call), up to the next top-level line."""
    found = None
    for m in re.finditer(rf"^def[ \t]+{re.escape(entry)}[ \t]*\(.*?(?=^\S|\Z)", code, re.M | re.S):
        found = m.group(0)
    return found


@lru_cache(maxsize=4096)
def _reference(expression: str) -> E.Expr | None:
    try:
        return E.parse(expression)
    except E.ExprError:
        return None


def structure_matches(code: str | None, entry: str, expression: str) -> bool:
    """Whether ``entry``'s returned expression in ``code`` is the reference expression, as parsed trees.

    Only the entry's own definition is parsed (the recalled bodies around it are not needed); when
    that snippet does not parse alone (a multi-line string at column 0), the whole program is.
    """
    if code is None:
        return False
    snippet = _entry_source(code, entry)
    for source in ([snippet] if snippet else []) + [code]:
        try:
            tree = E.parse_program(source, entry)
            # Parsing is rendering's inverse (tests/test_expr.py's round trips): a tree that
            # renders to the reference text IS the reference's tree, whose parse (~0.1 ms, most
            # of this check for a row seen once) is then not needed.
            return E.render(tree) == expression or tree == _reference(expression)
        except E.ExprError:
            continue
        except (RecursionError, MemoryError, ValueError):
            return False
    return False
