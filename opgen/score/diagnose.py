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
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache

from opgen import expr, ops
from opgen.ops import STUDY, OperatorLibrary
from opgen.score.cache import BoundedCache
from opgen.score.parse import Recall
from opgen.score.sandbox import Result, Unit
from opgen.score.settings import NAMESPACES  # noqa: F401 - re-exported (one home: opgen.score.settings)

PROBE_INPUTS = ("", "a", "Hello World", "racecar", "abcab", "AEIOU xyz", "a1b2!c", "zzyyx q", "The quick brown fox")
PROBE_INTS = (1, 2, 3)
PROBE_STRS = ("-", "ab", "xyz")
PROBE_PAIRS = (("abc", "xy"), ("", "hello"), ("Hi there", "QR"), ("aeiou", "12345"))

RECALL_CLASSES = ("correct", "chimera", "arity", "wrong_body", "no_definition", "syntax", "missing_import")


@cache
def native_imports(library: OperatorLibrary = STUDY) -> tuple[tuple[str, str], ...]:
    """``(module, name)`` of every name the native benchmark's module had in scope beyond the
    builtins: what the operators' shown sources import inside their bodies (the native module
    imported them once at its top, and its shown ``func_0`` calls ``gcd`` with no import).
    Derived from the library's sources: the study's give ``(("math", "gcd"),)``."""
    found: set[tuple[str, str]] = set()
    for op in library.operators:
        for node in ast.walk(expr.parse_python(op.source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.update((node.module, a.name) for a in node.names if a.asname is None)
    return tuple(sorted(found))


@cache
def native_names(library: OperatorLibrary = STUDY) -> frozenset[str]:
    return frozenset(name for _, name in native_imports(library))


def needs_native_names(code: str | None, tree: ast.Module | None = None,
                       library: OperatorLibrary = STUDY) -> bool:
    """Whether ``code`` reads a native-scope name (``gcd``) that nothing in it binds or imports."""
    if code is None:
        return False
    names = native_names(library)
    if not any(n in code for n in names):
        return False
    if tree is None:
        try:
            tree = expr.parse_python(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bool(read - bound)


@cache
def probe_args(kind: str) -> tuple[tuple[str | int, ...], ...]:
    """The fixed probe argument tuples of a signature kind (shared by every operator of that kind)."""
    if kind == "s":
        return tuple((s,) for s in PROBE_INPUTS)
    if kind == "s,int":
        return tuple((s, n) for s in PROBE_INPUTS for n in PROBE_INTS)
    if kind == "s,str":
        return tuple((s, p) for s in PROBE_INPUTS for p in PROBE_STRS)
    if kind == "s1,s2":
        return PROBE_PAIRS
    raise ValueError(f"unknown signature kind {kind!r} (known: {', '.join(ops.KINDS)})")


# The signature kinds (opgen.ops.KINDS, in their order) by their number of arguments.
KINDS_BY_ARITY = {a: tuple(k for k in ops.KINDS if k.count(",") + 1 == a) for a in (1, 2)}


@cache
def true_outputs(op_id: str, library: OperatorLibrary = STUDY) -> tuple[str | None, ...]:
    """The true operator's outputs on its kind's probes (None where it raises), computed in-process:
    this is the library's own code, not a model's."""
    op = library.get(op_id)
    out: list[str | None] = []
    with expr.recursion_headroom():
        for args in probe_args(op.kind):
            try:
                out.append(op.fn(*args))
            except Exception:
                out.append(None)
    return tuple(out)


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
    namespace: str = "strict"
    # strict namespace, a block that reads ``gcd`` without importing it: its probes run a second
    # time with the native names provided, to tell ``missing_import`` from ``wrong_body``.
    with_native: bool = False
    library: OperatorLibrary = STUDY  # the grade's library

    def unit(self) -> Unit | None:
        if not self.kinds:
            return None
        imports = native_imports(self.library) if self.namespace == "native" else ()
        return Unit(self.code or "", tuple((self.op, args) for k in self.kinds for args in probe_args(k)),
                    fail_fast=True, imports=imports)

    def units(self) -> list[Unit]:
        """What to run for this check (none, the probes, or the probes twice), in order."""
        first = self.unit()
        if first is None:
            return []
        if not self.with_native:
            return [first]
        return [first, Unit(first.code, first.calls, fail_fast=True, imports=native_imports(self.library))]


def _signature(code: str, name: str) -> tuple[int, int] | None | str:
    """(min, max) positional parameters of ``def name`` in ``code``; None if absent; "syntax" if unparsable."""
    try:
        module = expr.parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "syntax"
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            n = len(a.posonlyargs) + len(a.args)
            return (n - len(a.defaults), 10**6 if a.vararg else n)
    return None


# Verdicts by (operator, exact block text, namespace). Models recall the same definitions verbatim
# over and over, so a text judged once is not probed again. Only trusted conclusions are kept:
# the static ones (syntax, no definition, arity by signature), and probe verdicts of a block whose
# probes ran FIRST in their child (grade runs the recall probes before the program, and caches only
# the first check's). A unit that runs after another in the same child (the program, another
# block) could have changed what the later one's probes return (patched builtins, forged frames),
# so its verdict holds for its own response only and is never cached: no response can poison the
# verdict of another response's identical block. A nondeterministic definition keeps the verdict
# of the first clean run. Bounded in bytes: an entry is charged 4 bytes per character of its text
# and detail, plus 200.
VERDICT_CACHE_BYTES = 32 << 20
_VERDICTS: BoundedCache[tuple[str, str, str], tuple[str, str, str, tuple[int, int] | None]] = \
    BoundedCache(VERDICT_CACHE_BYTES)


def _remember(check: RecallCheck, cache: bool = True) -> RecallCheck:
    if check.code is not None and cache:
        _VERDICTS.put(_verdict_key(check.op, check.code, check.namespace, check.library),
                      (check.verdict, check.chimera_of, check.detail, check.arity_range),
                      4 * (len(check.code) + len(check.detail) + len(check.op)) + 200)
    return check


def _verdict_key(op: str, code: str, namespace: str, library: OperatorLibrary) -> tuple[str, str, str]:
    # A user library's verdicts are kept apart from the study's (the op id names another operator).
    return (op if library.is_study else f"{library.digest}:{op}", code, namespace)


def plan(recall: Recall, namespace: str, library: OperatorLibrary = STUDY) -> RecallCheck:
    """Static checks of one recall block, and the probe runs it needs when they pass (none when the
    same text was judged before)."""
    check = RecallCheck(recall.op, recall.code, namespace=namespace, library=library)
    known = _VERDICTS.get(_verdict_key(recall.op, recall.code, namespace, library)) \
        if recall.code is not None else None
    if known is not None:
        check.verdict, check.chimera_of, check.detail, check.arity_range = known
        return check
    try:
        op = library.get(recall.op)
    except ops.UnknownOperator:
        check.verdict, check.detail = "no_definition", f"{recall.op} is not a library operator"
        return check
    if recall.code is None:
        check.verdict, check.detail = "no_definition", "no code block after the recall header"
        return check
    sig = _signature(recall.code, op.id)
    if isinstance(sig, str):  # "syntax"
        check.verdict, check.detail = "syntax", "the block does not parse"
        return _remember(check)
    if sig is None:
        check.verdict, check.detail = "no_definition", f"the block does not define {op.id}"
        return _remember(check)
    check.arity_range = sig
    lo, hi = sig
    own = op.kind
    kinds = [own] if lo <= op.arity <= hi else []
    kinds += [k for a, ks in KINDS_BY_ARITY.items() if lo <= a <= hi for k in ks if k != own]
    check.kinds = tuple(kinds)
    if not kinds:
        check.verdict, check.detail = "arity", f"takes {lo}..{hi} parameters, {op.id} takes {op.arity}"
        return _remember(check)
    check.with_native = namespace == "strict" and needs_native_names(recall.code, library=library)
    return check


def conclude(check: RecallCheck, results: Sequence[Result], cache: bool = True) -> RecallCheck:
    """Compare the probe results with every true operator's outputs; set the verdict. ``cache``:
    the results come from a clean child (this check's probes ran first in it), so the verdict may
    be kept for later identical blocks."""
    n_probe = sum(len(probe_args(k)) for k in check.kinds)
    native_results = results[n_probe:2 * n_probe] if check.with_native else ()
    results = results[:n_probe]
    got: dict[str, tuple[str | None, ...]] = {}
    i = 0
    for kind in check.kinds:
        n = len(probe_args(kind))
        got[kind] = tuple(r.value if r.ok else None for r in results[i:i + n])
        i += n
    lib = check.library
    op = lib.get(check.op)
    own = op.kind
    lo, hi = check.arity_range or (0, 0)
    arity_ok = lo <= op.arity <= hi
    if arity_ok and got.get(own) == true_outputs(op.id, check.library):
        check.verdict = "correct"
        return _remember(check, cache)
    # The first operator (library order) whose every probe output the definition reproduces.
    for kind in check.kinds:
        for other in lib.of_kind(kind):
            if other != op.id and got[kind] == true_outputs(other, check.library):
                check.chimera_of = other
                break
        if check.chimera_of:
            break
    if not arity_ok:
        check.verdict = "arity"
        check.detail = f"takes {lo}..{hi} parameters, {op.id} takes {op.arity}"
    elif check.chimera_of:
        check.verdict, check.detail = "chimera", f"behaves as {check.chimera_of}"
    elif native_results and own in check.kinds and tuple(
            r.value if r.ok else None for r in native_results[:len(probe_args(own))]
    ) == true_outputs(op.id, check.library):
        # kinds[0] is the own kind when the arity fits: the first probes are the operator's own.
        names = ", ".join(f"from {m} import {n}" for m, n in native_imports(check.library))
        check.verdict = "missing_import"
        check.detail = f"correct once the native module's imports are in scope ({names}); namespace strict"
    else:
        check.verdict = "wrong_body"
        failed = [r for r in results if not r.ok]
        check.detail = failed[0].detail if failed else "differs from the operator on the probes"
    return _remember(check, cache)


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


def recall_plan(recalls: Sequence[Recall], expected: Sequence[str], namespace: str,
                library: OperatorLibrary = STUDY) -> RecallReport:
    """One check per first block of each expected operator; the rest are counted as duplicates/extras."""
    report = RecallReport(expected=tuple(expected))
    seen: dict[str, int] = {}
    for r in recalls:
        seen[r.op] = seen.get(r.op, 0) + 1
        if r.op in expected and seen[r.op] == 1:
            report.checks.append(plan(r, namespace, library))
    report.missing = tuple(op for op in expected if op not in seen)
    report.duplicated = tuple(op for op, n in seen.items() if n > 1)
    report.extra = tuple(op for op in seen if op not in expected)
    return report


# Names and attributes through which a program reaches its module's namespace (or a frame's) at
# run time, so that the function called may not be the one the tree shows.
_DYNAMIC_NAMES = frozenset({"globals", "vars", "locals", "exec", "eval", "compile", "setattr", "delattr", "getattr",
                            "__import__", "__builtins__", "breakpoint", "open"})
_DYNAMIC_MODULES = frozenset({"sys", "__main__", "builtins", "inspect", "importlib", "gc", "ctypes", "types",
                              "operator", "functools", "runpy", "code", "codeop", "pickle", "marshal"})
_FRAME_ATTRS = frozenset({"f_globals", "f_locals", "f_back", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
                          "ag_frame"})
# Any of those words (or a dunder) in the text: only then is the whole tree walked. Sound for ASCII
# text only (the parser folds non-ASCII identifiers with NFKC: a fullwidth ``ｇｌｏｂａｌｓ`` is
# ``globals``), so other text is always walked. Literal alternatives between word boundaries: each
# attempt is bounded by the longest word, the scan linear.
_TRIGGERS = re.compile(r"__|\b(?:" + "|".join(sorted(_DYNAMIC_NAMES | _DYNAMIC_MODULES | _FRAME_ATTRS)) + r")\b")


def called_def(tree: ast.Module, entry: str, code: str | None = None,
               vouched: Collection[int] = ()) -> ast.FunctionDef | None:
    """The module-level ``def entry`` that a call of ``entry`` after loading reaches, or None when
    the tree cannot promise one.

    Python calls whatever the name is bound to last, so the check follows the bindings: every
    binding of ``entry`` must be a statement of the module itself (not nested in a function, a
    class, or a compound statement), the last of them an undecorated ``def``; and nothing in the
    program may rebind names behind the tree's back (``globals()``, ``vars``, ``exec``/``eval``,
    ``setattr``, a ``global`` declaration of the entry, a dunder or frame attribute such as
    ``f.__globals__``, an import of ``sys``, ``builtins``, ``inspect`` and the like). ``code``, the
    tree's source, lets the common case skip the walk over the tree. ``vouched``: the ``id()`` of
    top-level statements the caller knows :func:`rebinds_behind` is False for (with this entry);
    only the others are walked (then the text is not scanned).
    """
    last = None
    n_top = 0
    for stmt in tree.body:
        if _binds(stmt, entry):
            last = stmt
            n_top += 1
    if not isinstance(last, ast.FunctionDef) or last.decorator_list:
        return None
    # The common case, decided without walking the tree: ASCII text, no trigger word, and the entry's
    # name written only in its top-level defs (so nothing else can bind it).
    if (not vouched and code is not None and code.isascii() and not _TRIGGERS.search(code)
            and code.count(entry) == n_top
            and all(isinstance(n, ast.FunctionDef) for n in tree.body if _binds(n, entry))):
        return last
    for stmt in tree.body:
        if id(stmt) not in vouched and rebinds_behind(stmt, entry):
            return None
    return last


def rebinds_behind(stmt: ast.stmt, entry: str) -> bool:
    """Whether a top-level statement (or anything in it) can make a call of ``entry`` reach another
    function than the tree's last top-level ``def entry`` (see :func:`called_def`): a dynamic name,
    a dunder or frame attribute, an import of a dynamic module, a ``global``/``nonlocal`` of the
    entry, or a binding of the entry below the top level.

    One pass over the nodes, dispatched on their type. A statement that binds through its targets
    (an assignment, a loop, ``with``, ``del``, a walrus) binds through a ``Name`` inside it, which
    the pass meets by itself, so only the kinds that bind without one are asked :func:`_binds`."""
    stack: list[ast.AST] = [stmt]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is ast.Name:
            if node.id in _DYNAMIC_NAMES or (node.id == entry and type(node.ctx) is not ast.Load):  # type: ignore[attr-defined]
                return True
            continue
        if kind is ast.Constant:
            continue
        if kind in _FLAGGED and _flagged(node, kind, entry):
            return True
        if kind in _NAME_BINDERS and node is not stmt and _binds(node, entry):
            return True
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        push(item)
            elif isinstance(value, ast.AST):
                push(value)
    return False


_FLAGGED = frozenset({ast.Attribute, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal})


def _flagged(node: ast.AST, kind: type, entry: str) -> bool:
    """rebinds_behind's verdict on one node of the kinds in _FLAGGED."""
    if kind is ast.Attribute:
        attr = node.attr  # type: ignore[attr-defined]
        return attr.startswith("__") or attr in _FRAME_ATTRS
    if kind is ast.Import or kind is ast.ImportFrom:
        names = node.names  # type: ignore[attr-defined]
        modules = [a.name for a in names] if kind is ast.Import else [node.module or ""]  # type: ignore[attr-defined]
        return any(m.split(".")[0] in _DYNAMIC_MODULES for m in modules)
    return entry in node.names  # type: ignore[attr-defined]


# The nodes that bind a name without a ``Name`` node of it (see rebinds_behind).
_NAME_BINDERS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                           ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.ExceptHandler})


def _binds(node: ast.AST, name: str) -> bool:
    """Whether ``node`` itself (not its children) binds ``name`` in the scope it sits in."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names)
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, (ast.Store, ast.Del))
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name == name
    if isinstance(node, ast.MatchMapping):
        return node.rest == name
    if isinstance(node, ast.ExceptHandler):
        return node.name == name
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith,
                         ast.Delete, ast.Expr)):
        # A module statement binds through its targets (or a walrus anywhere in it).
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
                   for n in ast.walk(node))
    return False


def parse_tree(code: str | None) -> ast.Module | None:
    """``ast.parse`` of a whole program (the scorer's one parse of it), None when it does not parse."""
    if code is None:
        return None
    try:
        tree = expr.parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree if isinstance(tree, ast.Module) else None


# Reference trees by ground-truth expression text (trusted), bounded in bytes: 64 bytes per character.
_REFERENCES: BoundedCache[str, tuple[expr.Expr | None]] = BoundedCache(16 << 20)


def _reference(expression: str) -> expr.Expr | None:
    hit = _REFERENCES.get(expression)
    if hit is None:
        try:
            hit = (expr.parse(expression),)
        except expr.ExprError:
            hit = (None,)
        _REFERENCES.put(expression, hit, 64 * len(expression) + 200)
    return hit[0]


def _same_expression(fn: ast.FunctionDef, expression: str) -> bool:
    """A user library's structure check: ``fn`` is ``def f(v): return <expr>`` and ``<expr>`` is
    the reference expression's tree (its input ``x`` written as ``v``), compared as ASTs (the
    grammar parser, opgen.expr, reads the study's operators only). The reference is the ground
    truth's; the function's tree was parsed in this grading process."""
    a = fn.args
    if fn.decorator_list or len(a.args) != 1 or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        return False
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    reference = _user_reference(expression, a.args[0].arg)
    return reference is not None and ast.dump(body[0].value) == reference


@lru_cache(maxsize=4096)  # reference expressions and parameter names: a few per dataset
def _user_reference(expression: str, var: str) -> str | None:
    try:
        node = expr.parse_python(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "x":
            sub.id = var
    return ast.dump(node)


def structure_matches(code: str | None, entry: str, expression: str, tree: ast.Module | None = None,
                      vouched: Collection[int] = (), library: OperatorLibrary = STUDY) -> bool:
    """Whether the ``entry`` that a call reaches returns the reference expression, as parsed trees.

    ``tree`` is the program's parse (parsed here when not given): the whole program is parsed, so
    that the function checked is the binding Python calls (:func:`called_def`, which ``vouched``
    goes to)."""
    if code is None:
        return False
    if tree is None:
        tree = parse_tree(code)
        if tree is None:
            return False
    try:
        fn = called_def(tree, entry, code, vouched)
        if fn is None:
            return False
        if not library.is_study:  # the grammar parser reads the study's operators only
            return _same_expression(fn, expression)
        found = expr.expression_of(fn)
        # Parsing is rendering's inverse (tests/test_expr.py's round trips): a tree that renders
        # to the reference text IS the reference's tree, whose parse (~0.1 ms, most of this check
        # for a row seen once) is then not needed.
        return expr.render(found) == expression or found == _reference(expression)
    except expr.ExprError:
        return False
    except (RecursionError, MemoryError, ValueError):
        return False
