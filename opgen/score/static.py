"""Grade without running: the sandbox's results for programs that provably run only library code.

A trained model mostly recalls the library's definitions verbatim. :func:`evaluate` answers a
response's units (its program and its recall probes, exactly what ``grade`` would send to
``Sandbox.run_units``) with the :class:`Result` list the sandbox would return and the units' trees,
or ``None`` — and then the response goes to the sandbox as before. It answers only when all of this holds:

- every top-level statement of every unit is a function definition or a constant (a docstring);
- every definition is, as an AST (docstrings and other constant statements aside, formatting
  never seen), the shown source of a library operator (``opgen/ops.py``) with only the defined
  name changed — under its own name, another ``func_N`` name (a chimera) or an entry's name — or,
  for an entry point, a one-argument function whose body is one ``return`` of opgen's expression
  grammar (``x``, string literals, ``+``, the grammar's methods, calls ``name(arg, ...)`` whose
  arguments are expressions or int literals, any number of them); or a library definition up to
  a provably consistent renaming of the names its body binds (see :func:`_alpha`);
- nothing the evaluation does could reach a limit the sandbox enforces by time or memory, or a
  recursion depth where the two processes' stacks differ (see :func:`_guard`).

The result of a call is then computed here by the library's own code: each defined name is bound
to a function compiled from the library's source of the body it holds (under that name, so that
error messages name it as Python would), in a fresh namespace per unit, so recursive operators
recurse through whatever the program bound to their names, as in the sandbox. No model code is
compiled or run. Exceptions get the worker's own classes and detail text
(``jail.child.classify``), returned values its output cap and ``not_a_string`` rule.

tests/test_static_differential.py grades generated programs (correct, chimeras, arity errors,
renamed variables, mutated bodies, limits) both ways and requires the same grade dict.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from opgen import expr as E
from opgen import ops
from opgen.ops import STUDY, OperatorLibrary
from opgen.score import diagnose
from opgen.score.jail.child import classify
from opgen.score.sandbox import Result, Unit

# The sandbox limits under which the static path applies at all: its evaluations stay far below
# them (WORK_BUDGET is ~0.1 s of CPU at the slowest per-character operator on a loaded 2-CPU VM).
MIN_TIMEOUT_S = 0.5
MIN_MEMORY_MB = 128
MAX_VALUE_CHARS = 1_000_000  # no value built here is longer (4 MB at most)
WORK_BUDGET = 400_000  # per response: interpreted steps + copied characters / 16
MAX_RECURSION = 2_000  # deepest recursion through a recursive operator evaluated here
MAX_EXPR_DEPTH = 60  # nesting of an entry's expression
SMALL_STR, SMALL_INT = 64, 64  # arguments of a call whose types do not fit the body it reaches

# Exceptions a library body can raise on arguments that pass _guard, and whose class and text do
# not depend on the process: the same here and in the sandbox's child.
_PORTABLE = (TypeError, AttributeError, NameError, IndexError, ValueError, ZeroDivisionError, KeyError)
_FUNC_NAME = re.compile(r"func_[0-9]+\Z")


class _Decline(Exception):
    """The static path cannot prove the sandbox's result: the response goes to the sandbox."""


# ---------------------------------------------------------------- recognising definitions


def _strip(node: ast.AST) -> list[tuple[list, list]]:
    """Drop constant expression statements (docstrings included) from every body: they do nothing.
    Returns what to give back to :func:`_unstrip` (``(body, its statements before)`` pairs)."""
    saved = []
    for sub in ast.walk(node):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(sub, name, None)
            if isinstance(stmts, list):
                kept = [s for s in stmts if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(kept) != len(stmts):
                    saved.append((stmts, stmts[:]))
                    stmts[:] = kept
    return saved


def _unstrip(saved: list[tuple[list, list]]) -> None:
    for stmts, before in reversed(saved):
        stmts[:] = before


_PLACEHOLDER = "\0"


def _body_key(fn: ast.FunctionDef) -> str:
    """The definition's AST without its name and constant statements (``fn`` is left as it was:
    it is the program's own tree, which the structure check reads afterwards)."""
    name, fn.name = fn.name, _PLACEHOLDER
    saved = _strip(fn)
    try:
        return ast.dump(fn)
    finally:
        _unstrip(saved)
        fn.name = name


@cache
def _ids(library: OperatorLibrary) -> frozenset[str]:
    return frozenset(library.ids)


def _op_name(name: str, library: OperatorLibrary) -> bool:
    """Whether a definition's name is an operator's name: ``func_N`` for the study (another
    operator's number is a chimera), a user library's own ids otherwise."""
    return bool(_FUNC_NAME.match(name)) if library.is_study else name in _ids(library)


@cache
def _library(library: OperatorLibrary = STUDY) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """(normalised AST dump -> operator id, operator id -> library names its body refers to)."""
    keys: dict[str, str] = {}
    refs: dict[str, frozenset[str]] = {}
    ids = _ids(library)
    for op in library.operators:
        module = E.parse_python(op.source)
        if len(module.body) != 1 or not isinstance(module.body[0], ast.FunctionDef):
            continue  # a user operator whose source is more than its definition: never static
        (fn,) = module.body
        assert isinstance(fn, ast.FunctionDef)
        refs[op.id] = frozenset(n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in ids)
        keys.setdefault(_body_key(fn), op.id)
    return keys, refs


@cache
def _verbatim(name: str, library: OperatorLibrary = STUDY) -> tuple[tuple[str, str, ast.FunctionDef], ...]:
    """(exact source text, operator id, the text's parse) of every operator's source defined under
    ``name``, the operator of that name first (the commonest case by far). The parsed definitions
    are shared by every program that holds the text: nothing may change them."""
    out = []
    refs = _library(library)[1]
    for op in sorted(library.operators, key=lambda o: o.id != name):
        head = f"def {op.id}("
        if op.id not in refs or not op.source.startswith(head):
            continue  # (the study's sources all start so: a user's may not)
        text = f"def {name}(" + op.source[len(head):]
        (fn,) = E.parse_python(text).body
        assert isinstance(fn, ast.FunctionDef)
        out.append((text, op.id, fn))
    return tuple(out)


@cache
def _signature(body: str, library: OperatorLibrary = STUDY) -> tuple[int, tuple[type, ...], frozenset[str]]:
    """(arity, the argument types it is written for, library names it refers to) of an operator."""
    op = library.get(body)
    types_ = (str,) * op.n_inputs + tuple(int if p.kind == "int" else str for p in op.params)
    return op.arity, types_, _library(library)[1][body]


@lru_cache(maxsize=1024)  # names are the model's: bounded (a code object is a few KB)
def _code(body: str, name: str, renaming: tuple[tuple[str, str], ...] = (),
          library: OperatorLibrary = STUDY) -> types.CodeType:
    """The library's code for ``body`` defined as ``name``: compiled from the library's own source,
    its bound names renamed by ``renaming`` (an :class:`_Alpha`'s, proved consistent)."""
    module = E.parse_python(library.get(body).source)
    fn = module.body[0]
    assert isinstance(fn, ast.FunctionDef)
    if renaming:
        new = dict(renaming)
        for node in ast.walk(fn):
            if type(node) is ast.Name:
                node.id = new.get(node.id, node.id)
            elif type(node) is ast.arg:
                node.arg = new.get(node.arg, node.arg)
            elif type(node) is ast.FunctionDef and node is not fn:
                node.name = new.get(node.name, node.name)
    fn.name = name
    code = compile(module, f"<opgen {body}>", "exec", dont_inherit=True)
    return next(c for c in code.co_consts if isinstance(c, types.CodeType))


@dataclass(frozen=True)
class _Grammar:
    """An entry point: ``def name(param): return <expr>`` with ``expr`` in the grammar."""

    param: str
    expr: ast.expr


def _grammar_def(fn: ast.FunctionDef) -> _Grammar | None:
    a = fn.args
    if (fn.decorator_list or fn.returns is not None or a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg
            or a.defaults or len(a.args) != 1 or a.args[0].annotation is not None):
        return None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return _Grammar(a.args[0].arg, body[0].value)


def _verbatim_prefix(code: str, verbatim: dict[int, tuple[str, str]] | None,
                     library: OperatorLibrary = STUDY,
                     ) -> tuple[dict[str, str | _Grammar | _Alpha], list[ast.stmt], int]:
    """The leading exact library sources of ``code`` (blank lines between them): what they bind,
    their shared definitions, and where the rest begins."""
    bound: dict[str, str | _Grammar | _Alpha] = {}
    stmts: list[ast.stmt] = []
    pos, n = 0, len(code)
    while pos < n:
        if code[pos] == "\n":
            pos += 1
            continue
        if not code.startswith("def func_" if library.is_study else "def ", pos):
            break
        name_end = code.find("(", pos + 4, pos + 40)
        name = code[pos + 4:name_end] if name_end > 0 else ""
        if name not in _ids(library):  # other names are parsed (and _verbatim's cache stays 25 entries)
            break
        for text, body, fn in _verbatim(name, library):
            if code.startswith(text, pos):
                bound[name] = body
                stmts.append(fn)
                if verbatim is not None:
                    verbatim[id(fn)] = (name, body)
                pos += len(text)
                break
        else:
            break
    return bound, stmts, pos


def _bindings(code: str, entries: frozenset[str], verbatim: dict[int, tuple[str, str]] | None = None,
              library: OperatorLibrary = STUDY,
              ) -> tuple[dict[str, str | _Grammar | _Alpha], list[ast.stmt]]:
    """What each name of the program is bound to after it runs — an operator id (the body it holds)
    or an entry's expression — and the program's top-level statements (its ``ast.parse``, line
    numbers aside). Raises _Decline for anything else. ``verbatim`` collects the library's own
    definitions matched as text: (name, operator) by node id.

    Leading exact library sources (the commonest case) are matched as text; the rest is parsed.
    Text of complete top-level definitions followed by text whose first line is at column 0 (any
    other start does not parse alone) tokenizes as the two parts one after the other, so the rest's
    statements are the program's remaining statements (tests/test_static.py compares the two trees).
    """
    bound, stmts, pos = _verbatim_prefix(code, verbatim, library)
    rest = code[pos:]
    if rest.strip():
        try:
            module = E.parse_python(rest)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise _Decline from None
        keys, _ = _library(library)
        for stmt in module.body:
            stmts.append(stmt)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if not isinstance(stmt, ast.FunctionDef):
                raise _Decline
            name = stmt.name
            grammar = _grammar_def(stmt) if name in entries else None
            if grammar is not None:
                bound[name] = grammar
                continue
            if not (_op_name(name, library) or name in entries):
                raise _Decline
            try:
                body = keys.get(_body_key(stmt))
            except (ValueError, RecursionError, MemoryError):  # an int literal ast.dump refuses to print
                raise _Decline from None
            if body is None:
                # A recall under renamed bound names (parameters, locals): the same function when
                # the renaming is provably consistent (see _alpha); anything else declines.
                alpha = _alpha(stmt, entries, library)
                if alpha is None:
                    raise _Decline
                bound[name] = alpha
                continue
            bound[name] = body
    return bound, stmts


# ---------------------------------------------------------------- alpha-renamed recalls
#
# A definition that is a library operator's AST up to a consistent renaming of the names its body
# binds (parameters, locals, loop and comprehension targets, nested functions and their
# parameters) is that operator: Python's scoping depends only on where each name is bound, and an
# injective renaming of bound names that leaves every other name alone, and moves no bound name
# onto one of them, keeps every binding and every lookup where it was. The comparison is a typed
# walk over the two trees, driven by the library's tree (so bounded by it); the function then
# bound is compiled from the library's tree with the renaming applied (the model's names, so that
# error messages naming a parameter or a nested function read as Python would write them).

MAX_RENAMED_NAME = 64  # a longer name declines (names are part of _code's cache key)


@dataclass(frozen=True)
class _Alpha:
    """A library body under renamed bound names: (library name, program's name) pairs, sorted."""

    body: str
    renaming: tuple[tuple[str, str], ...]


_IDENT_FIELDS = {  # identifier fields compared exactly (never renamed)
    ast.Attribute: ("attr",), ast.keyword: ("arg",), ast.alias: ("name", "asname"), ast.ImportFrom: ("module",),
    ast.Global: ("names",), ast.Nonlocal: ("names",), ast.ExceptHandler: ("name",), ast.ClassDef: ("name",),
    ast.MatchAs: ("name",), ast.MatchStar: ("name",), ast.MatchMapping: ("rest",),
}


@cache
def _alpha_facts(op_id: str, library: OperatorLibrary = STUDY,
                 ) -> tuple[ast.FunctionDef, frozenset[str], frozenset[str]]:
    """(the operator's parse, the names its body binds that a renaming may change, the names it
    must keep): a name is renameable only where every scope of the body that knows it holds it
    as a parameter, a local or a closure cell — never a global, a builtin, an import or a
    declared global/nonlocal — and no exactly compared field (an attribute, a keyword argument,
    an import) spells it."""
    import symtable

    source = library.get(op_id).source
    (fn,) = E.parse_python(source).body
    assert isinstance(fn, ast.FunctionDef)
    candidates: set[str] = set()
    fixed: set[str] = set()
    stack = list(symtable.symtable(source, "<opgen>", "exec").get_children())
    while stack:
        table = stack.pop()
        stack.extend(table.get_children())
        for sym in table.get_symbols():
            name = sym.get_name()
            if name.startswith("."):  # a comprehension's implicit argument
                continue
            if sym.is_global() or sym.is_declared_global() or sym.is_imported() or sym.is_nonlocal():
                fixed.add(name)
            else:
                candidates.add(name)
    for node in ast.walk(fn):
        for field in _IDENT_FIELDS.get(type(node), ()):
            value = getattr(node, field)
            fixed.update(value if isinstance(value, list) else [value] if value else [])
    fixed.add(fn.name)
    return fn, frozenset(candidates - fixed), frozenset(fixed)


def _stmts(items: list) -> list:
    """A statement list without its constant expression statements (docstrings: they do nothing)."""
    return [s for s in items if not (type(s) is ast.Expr and type(s.value) is ast.Constant)]


class _Mismatch(Exception):
    pass


def _same_constant(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) in (float, complex):
        return repr(a) == repr(b)
    if type(a) in (tuple, frozenset):
        return False  # never in a parsed tree (only the optimizer folds them)
    return a == b


class _AlphaWalk:
    """One comparison of a library definition with a program's, collecting the renaming."""

    def __init__(self, renameable: frozenset[str], top: ast.FunctionDef):
        self.renameable = renameable
        self.top = top  # the compared definition itself: its name binds in the module
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def name(self, lib: str, got: object) -> None:
        if type(got) is not str:
            raise _Mismatch
        if lib not in self.renameable:
            if got != lib:
                raise _Mismatch
        if self.forward.setdefault(lib, got) != got or self.backward.setdefault(got, lib) != lib:
            raise _Mismatch  # inconsistent, or two names onto one

    def node(self, lib: ast.AST, got: object) -> None:
        kind = type(lib)
        if type(got) is not kind:
            raise _Mismatch
        for field in lib._fields:
            a, b = getattr(lib, field, None), getattr(got, field, None)
            if lib is self.top and field == "name":
                continue
            if (kind is ast.Name and field == "id") or (kind is ast.arg and field == "arg") or \
                    (kind is ast.FunctionDef and field == "name"):
                self.name(a, b)  # type: ignore[arg-type]
            elif isinstance(a, ast.AST):
                self.node(a, b)  # type: ignore[arg-type]
            elif type(a) is list:
                self.items(field, a, b)
            elif kind is ast.Constant and field == "value":
                if not _same_constant(a, b):
                    raise _Mismatch
            elif type(a) is not type(b) or a != b:  # operators' flags, Constant.kind, exact identifiers
                raise _Mismatch

    def items(self, field: str, a: list, b: object) -> None:
        if type(b) is not list:
            raise _Mismatch
        if field in ("body", "orelse", "finalbody"):
            a, b = _stmts(a), _stmts(b)
        if len(a) != len(b):
            raise _Mismatch
        for x, y in zip(a, b):
            if isinstance(x, ast.AST):
                self.node(x, y)
            elif type(x) is not type(y) or x != y:  # identifiers (Global.names ...): exact
                raise _Mismatch


def _allowed_target(new: str, fixed: frozenset[str], taken: frozenset[str],
                    library: OperatorLibrary = STUDY) -> bool:
    """Whether a bound name may be renamed to ``new``: no capture of anything the body or the
    program could mean by it (a builtin, a name the body keeps, a library or entry name, the
    definition's own name, a dunder)."""
    return (new.isascii() and new.isidentifier() and len(new) <= MAX_RENAMED_NAME and new not in fixed
            and new not in taken and not hasattr(builtins, new) and not new.startswith("__")
            and not _FUNC_NAME.match(new) and not new.startswith("main_solution") and new not in ops.BY_ID
            and new not in _ids(library))


def _alpha(stmt: ast.FunctionDef, entries: frozenset[str], library: OperatorLibrary = STUDY,
           ) -> _Alpha | None:
    """The library body ``stmt`` holds under a provably consistent renaming of its bound names,
    or None. The defined name is not part of the renaming (it binds in the module)."""
    taken = entries | {stmt.name}
    for op in sorted(library.operators, key=lambda o: o.id != stmt.name):
        lib, renameable, fixed = _alpha_facts(op.id, library)
        walk = _AlphaWalk(renameable, lib)
        try:
            walk.node(lib, stmt)
        except _Mismatch:
            continue
        renaming = tuple(sorted((a, b) for a, b in walk.forward.items() if a != b))
        if all(_allowed_target(b, fixed, frozenset(taken), library) for _, b in renaming):
            return _Alpha(op.id, renaming)
        return None  # the first structural match decides: a capture declines
    return None


# ---------------------------------------------------------------- evaluating


class _Run:
    """One response's evaluation: its namespace per unit, its work budget, the sandbox's output cap."""

    def __init__(self, max_output: int, library: OperatorLibrary = STUDY):
        self.max_output = max_output
        self.work = 0
        self.library = library

    def namespace(self, bound: dict[str, str | _Grammar | _Alpha]) -> dict:
        ns: dict = {"__name__": "__main__", "__builtins__": builtins}
        self.bodies: dict[str, str] = {}
        self.grammar: dict[str, _Grammar] = {}
        for name, what in bound.items():
            if isinstance(what, _Grammar):
                self.grammar[name] = what
                ns[name] = what
            elif isinstance(what, _Alpha):
                self.bodies[name] = what.body
                ns[name] = types.FunctionType(_code(what.body, name, what.renaming, library=self.library), ns, name)
            else:
                self.bodies[name] = what
                ns[name] = types.FunctionType(_code(what, name, library=self.library), ns, name)
        self.ns = ns
        return ns

    def charge(self, steps: int) -> None:
        self.work += steps
        if self.work > WORK_BUDGET:
            raise _Decline

    def call(self, name: str, args: tuple) -> object:
        """``name(*args)``, ``name`` bound to a library body."""
        self.guard(self.bodies[name], args)
        return self.ns[name](*args)

    def guard(self, body: str, args: tuple) -> None:
        """Decline unless the call provably stays far below every time, memory and stack limit."""
        arity, wanted, refs = _signature(body, self.library)
        for ref in refs:
            # A recursive operator recurses through the name it was written with: only the same
            # body (or nothing: a NameError) there keeps the recursion the one costed below.
            if ref in self.ns and self.bodies.get(ref) != body:
                raise _Decline
        if len(args) != arity:
            return  # Python refuses the call before the body runs (TypeError)
        if tuple(map(type, args)) == wanted:
            out, steps, depth = _cost(body, args, self.library)
            if out > MAX_VALUE_CHARS or depth > min(MAX_RECURSION, sys.getrecursionlimit() - 500):
                raise _Decline
            self.charge(steps)
            return
        # Types that do not fit the body: it fails or returns at once, provided nothing is large
        # (a '%' in a string could be a format with a huge width: `n % len(s)` in func_8).
        for a in args:
            if type(a) is str:
                if len(a) > SMALL_STR or "%" in a:
                    raise _Decline
            elif type(a) is not int or not -SMALL_INT <= a <= SMALL_INT:
                raise _Decline
        self.charge(SMALL_STR * SMALL_INT // 16 + 2 * SMALL_INT)  # at most a 64 x 64 repetition or loop

    def expr(self, node: ast.expr, param: str, x: str, depth: int) -> object:
        """The value of a grammar expression, in Python's evaluation order."""
        if depth > MAX_EXPR_DEPTH:
            raise _Decline
        if isinstance(node, ast.Name):
            if node.id != param:
                raise _Decline
            return x
        if isinstance(node, ast.Constant):
            if type(node.value) is not str or len(node.value) > MAX_VALUE_CHARS:
                raise _Decline
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.concat(node, param, x, depth)
        if isinstance(node, ast.Call) and not node.keywords:
            if isinstance(node.func, ast.Attribute):
                return self.method(node, node.func, param, x, depth)
            return self.named_call(node, param, x, depth)
        raise _Decline

    def concat(self, node: ast.BinOp, param: str, x: str, depth: int) -> object:
        left = self.expr(node.left, param, x, depth + 1)
        right = self.expr(node.right, param, x, depth + 1)
        if type(left) is str and type(right) is str:
            if len(left) + len(right) > MAX_VALUE_CHARS:
                raise _Decline
            self.charge((len(left) + len(right)) // 16 + 1)
        elif not (_small(left) and _small(right)):
            raise _Decline
        return left + right  # type: ignore[operator]

    def method(self, node: ast.Call, func: ast.Attribute, param: str, x: str, depth: int) -> object:
        if func.attr not in ops.METHODS or node.args:
            raise _Decline
        value = self.expr(func.value, param, x, depth + 1)
        if type(value) is str:
            if 3 * len(value) > MAX_VALUE_CHARS:  # case mappings grow a character at most 3-fold
                raise _Decline
            self.charge(len(value) + 1)
        elif not _small(value):
            raise _Decline
        return getattr(value, func.attr)()

    def named_call(self, node: ast.Call, param: str, x: str, depth: int) -> object:
        func = node.func
        if not isinstance(func, ast.Name) or func.id == param:
            raise _Decline
        name = func.id
        # The callee is looked up before the arguments are evaluated.
        if name not in self.bodies:
            if name in self.ns or hasattr(builtins, name):
                raise _Decline  # an entry point, a module attribute or a builtin
            raise NameError(f"name '{name}' is not defined")
        args = tuple(self.arg(a, param, x, depth + 1) for a in node.args)
        return self.call(name, args)

    def arg(self, node: ast.expr, param: str, x: str, depth: int) -> object:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
                and type(node.operand.value) is int):
            return -node.operand.value
        if isinstance(node, ast.Starred):
            raise _Decline
        return self.expr(node, param, x, depth)

    def result(self, call: tuple[str, tuple]) -> Result:
        """One call of a unit, as the worker's child reports it (worker._run_calls)."""
        entry, args = call
        args = tuple(args)
        if entry not in self.ns:
            return Result("missing_name", None, f"{entry} is not defined")
        try:
            value = self.value(entry, args)
        except _Decline:
            raise
        except (RecursionError, MemoryError):
            raise _Decline from None
        except _PORTABLE as exc:
            status, detail = classify(exc)
            _encodable(detail)
            return Result(status, None, detail)
        except Exception:
            raise _Decline from None
        if type(value) is not str:
            if type(value) is not int:
                raise _Decline
            return Result("not_a_string", None, f"returned {type(value).__name__}")
        _encodable(value)
        if len(value) > self.max_output:
            return Result("output_too_large", None, f"{len(value)} characters > {self.max_output}")
        return Result("ok", value, "")

    def value(self, entry: str, args: tuple) -> object:
        """What calling ``entry`` with ``args`` returns (or raises)."""
        if entry in self.grammar:
            if len(args) != 1 or type(args[0]) is not str:
                raise _Decline
            grammar = self.grammar[entry]
            return self.expr(grammar.expr, grammar.param, args[0], 0)
        if entry in self.bodies:
            return self.call(entry, args)
        raise _Decline  # __name__, __builtins__


def _encodable(text: str) -> None:
    """Decline text with lone surrogates (UTF-8 cannot encode them): the sandbox's own business."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _Decline from None


def _small(value: object) -> bool:
    if type(value) is str:
        return len(value) <= SMALL_STR and "%" not in value
    return type(value) is int and -SMALL_INT <= value <= SMALL_INT


def _cost(body: str, args: tuple, library: OperatorLibrary = STUDY) -> tuple[int, int, int]:
    """(longest output, work, recursion depth) of the library operator ``body`` on well-typed
    ``args``: the operator's own cost bound (``Operator.cost`` in opgen/ops.py, integer sizes in
    bits included)."""
    cost = library.get(body).cost
    if cost is None:
        raise _Decline  # an operator without a cost bound (every YAML library's): the sandbox grades it
    return cost(len(args[0]), args[1] if len(args) > 1 else None)


# ---------------------------------------------------------------- the entry point


def applies(sandbox: object) -> bool:
    """Whether the sandbox's limits leave the static path's evaluations far inside them."""
    return (getattr(sandbox, "timeout_s", 0) >= MIN_TIMEOUT_S and getattr(sandbox, "memory_mb", 0) >= MIN_MEMORY_MB
            and isinstance(getattr(sandbox, "max_output", None), int))


@dataclass(frozen=True)
class Evaluation:
    """What the static path proved of a response's units: the results ``sandbox.run_units`` would
    give, and each unit's parse (``ast.parse`` of its code, line numbers aside; None for a unit
    without calls). The trees hold shared nodes: read them, never change them."""

    results: list[Result]
    trees: list[ast.Module | None]
    # The library's own definitions in the trees, matched as text: (name, operator) by node id.
    verbatim: dict[int, tuple[str, str]]
    library: OperatorLibrary = STUDY

    def vouched(self, entry: str) -> frozenset[int]:
        """The ids of the trees' library definitions that cannot rebind ``entry`` behind the tree's
        back (``diagnose.rebinds_behind``, asked once per definition and entry name)."""
        return frozenset(k for k, (name, body) in self.verbatim.items()
                         if not _rebinds(name, body, entry, self.library))


@lru_cache(maxsize=4096)  # entry names are the ground truth's (a few per dataset)
def _rebinds(name: str, body: str, entry: str, library: OperatorLibrary = STUDY) -> bool:
    fn = next(f for _, b, f in _verbatim(name, library) if b == body)
    return diagnose.rebinds_behind(fn, entry)


def evaluate(units: Sequence[Unit], sandbox: object, library: OperatorLibrary = STUDY,
             ) -> Evaluation | None:
    """The results ``sandbox.run_units(units)`` would give and the units' trees, or None when the
    results are not provable (the response then goes to the sandbox). ``library``: the grade's
    operator library."""
    if not applies(sandbox):
        return None
    run = _Run(sandbox.max_output, library)  # type: ignore[attr-defined]
    plans = []
    trees: list[ast.Module | None] = []
    verbatim: dict[int, tuple[str, str]] = {}
    try:
        for unit in units:
            if not unit.calls:
                trees.append(None)
                continue
            if getattr(unit, "imports", ()):  # the native namespace: names bound before the program
                return None
            entries = frozenset(e for e, _ in unit.calls if not _op_name(e, library))
            bound, stmts = _bindings(unit.code, entries, verbatim, library)
            plans.append((bound, unit.calls))
            trees.append(ast.Module(body=stmts, type_ignores=[]))
        out: list[Result] = []
        # No recursion limit is raised here (it is the process's, shared by its threads): a
        # grading process runs with one above MAX_RECURSION for its whole life
        # (batch.GRADER_RECURSION); under a lower one a deep recursion declines.
        for bound, calls in plans:
            run.namespace(bound)
            for call in calls:
                out.append(run.result(call))
        return Evaluation(out, trees, verbatim, library)
    except (_Decline, RecursionError, MemoryError):
        return None

