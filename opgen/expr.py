"""Typed expression trees: the one structure that is sampled, evaluated, measured, rendered and parsed.

Grammar (as the native benchmark writes programs)::

    expr := x | 'literal' | func_N(expr[, expr], param...) | (expr + expr) | (expr).method()

Rendering is byte-exact with the native generator: ``func_5(func_3(func_1(x, 2)), 'ab')``,
``(x + 'abc')``, ``(func_2(x)).upper()``.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Union, overload

from opgen import ops
from opgen.errors import USAGE, OpgenError
from opgen.ops import STUDY, OperatorLibrary

ParamValue = ops.ParamValue


class ExprError(ValueError, OpgenError):
    """Source text that is not an expression of the grammar, or a tree that breaks it."""

    exit_code = USAGE


class OutputTooLong(ValueError, OpgenError):
    """An intermediate or final value exceeded the length limit given to ``evaluate``."""

    exit_code = 1


    def __init__(self, length: int, limit: int):
        super().__init__(f"value of {length} characters exceeds the limit of {limit}")
        self.length = length
        self.limit = limit


# Nodes are frozen dataclasses whose __init__ stores into __dict__ instead of the generated one's
# object.__setattr__ per field: the same objects (tests/test_expr.py), at under half the cost of
# making one, and generators make several per row.


@dataclass(frozen=True)
class Var:
    name: str = "x"

    def __init__(self, name: str = "x"):
        self.__dict__["name"] = name


@dataclass(frozen=True)
class Lit:
    value: str

    def __init__(self, value: str):
        self.__dict__["value"] = value


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple[Expr, ...]
    params: tuple[ParamValue, ...] = ()

    def __init__(self, op: str, args: tuple[Expr, ...], params: tuple[ParamValue, ...] = ()):
        d = self.__dict__
        d["op"] = op
        d["args"] = args
        d["params"] = params


@dataclass(frozen=True)
class Concat:
    left: Expr
    right: Expr

    def __init__(self, left: Expr, right: Expr):
        d = self.__dict__
        d["left"] = left
        d["right"] = right


@dataclass(frozen=True)
class Method:
    expr: Expr
    name: str

    def __init__(self, expr: Expr, name: str):
        d = self.__dict__
        d["expr"] = expr
        d["name"] = name


Expr = Union[Var, Lit, Call, Concat, Method]


def call(op_id: str, *args: Expr, params: tuple[ParamValue, ...] = (), lib: OperatorLibrary = STUDY) -> Call:
    """Build a checked call node (``lib``: the operator library, default the study's)."""
    node = Call(op_id, tuple(args), tuple(params))
    _check_call(node, lib)
    return node


# Every function here that looks an operator up takes the operator library (``lib``, the study's by
# default), so a user library's rows parse and evaluate with their own operators.


def _check_call(node: Call, lib: OperatorLibrary = STUDY) -> None:
    op = lib.get(node.op)
    if len(node.args) != op.n_inputs or len(node.params) != len(op.params):
        raise ExprError(
            f"{node.op} takes {op.arity} arguments {op.signature}, got {len(node.args) + len(node.params)}"
        )
    for spec, value in zip(op.params, node.params):
        if not spec.accepts(value):
            raise ExprError(f"{node.op}: parameter {spec.name} must be {spec.kind}, got {value!r}")


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Concat):
        return (e.left, e.right)
    if isinstance(e, Method):
        return (e.expr,)
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order traversal (the order names appear in the rendered source)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


# ---------------------------------------------------------------- evaluation


def evaluate(e: Expr, x: str, max_len: int | None = None, lib: OperatorLibrary = STUDY) -> str:
    """Evaluate by calling the library's operators directly.

    With ``max_len``, raise :class:`OutputTooLong` as soon as any intermediate value is longer,
    so that explosive programs (``func_1`` nested twenty deep) are rejected before they allocate.
    """
    if isinstance(e, Var):
        value = x
    elif isinstance(e, Lit):
        value = e.value
    elif isinstance(e, Call):
        args = [evaluate(a, x, max_len, lib) for a in e.args]
        op = lib.get(e.op)
        if max_len is not None:
            precheck_op(op, e, args, max_len)
        value = op.fn(*args, *e.params)
    elif isinstance(e, Concat):
        value = evaluate(e.left, x, max_len, lib) + evaluate(e.right, x, max_len, lib)
    elif isinstance(e, Method):
        # A hand-built tree could name any attribute; only the grammar's methods may be called.
        if e.name not in ops.METHODS:
            raise ExprError(f"unknown method .{e.name}() (allowed: {', '.join(ops.METHODS)})")
        value = getattr(evaluate(e.expr, x, max_len, lib), e.name)()
    else:  # pragma: no cover - the union is closed
        raise ExprError(f"not an expression node: {e!r}")
    if max_len is not None and len(value) > max_len:
        raise OutputTooLong(len(value), max_len)
    return value


def call_capped(node: Call, fn: Callable[..., str], inputs: tuple[str, ...], max_len: int,
                op: ops.Operator | None = None) -> str:
    """``node``'s operator (``fn``) applied to known input values, with ``evaluate``'s guards.

    Generators that compute a value as they draw (one call on ``x``, a chain growing outwards) use
    this instead of walking the finished tree: an input or output over ``max_len``, or a call that
    would build one, raises :class:`OutputTooLong` before anything larger is allocated.
    """
    for value in inputs:
        if len(value) > max_len:
            raise OutputTooLong(len(value), max_len)
    if op is None:
        _precheck(node, inputs, max_len)
    else:  # the caller's operator (a user library's): its own growth bound
        precheck_op(op, node, inputs, max_len)
    value = fn(*inputs, *node.params)
    if len(value) > max_len:
        raise OutputTooLong(len(value), max_len)
    return value


# The operators with a growth bound (Operator.out_len, in opgen.ops): a call which would build a huge
# string (func_1 with n=4 on a 10^6-character value) is refused before it runs. The others grow at
# most twofold and are checked after they return.
PRECHECKED = tuple(op.id for op in ops.OPERATORS if op.out_len is not None)


def _precheck(node: Call, args: Sequence[str], max_len: int) -> None:
    out_len = ops.get(node.op).out_len
    if out_len is None:
        return
    out = out_len(len(args[0]), node.params)
    if out > max_len:
        raise OutputTooLong(out, max_len)


def precheck_op(op: ops.Operator, node: Call, args: Sequence[str], max_len: int) -> None:
    """:func:`_precheck` with the operator in hand (any library's): its growth bound, if it has one."""
    out_len = op.out_len
    if out_len is None:
        return
    out = out_len(len(args[0]), node.params)
    if out > max_len:
        raise OutputTooLong(out, max_len)


@contextlib.contextmanager
def recursion_headroom(limit: int = 20_000) -> Iterator[None]:
    """Raise the interpreter's recursion limit while evaluating recursive operators on long strings.

    ``func_17`` and ``func_20`` recurse once per character; without headroom, whether a 950-character
    value evaluates would depend on how deep the caller's stack happens to be.
    """
    global _headroom_holders, _headroom_saved
    # The limit is one per interpreter, but threads (a scorer's or builder's pool) enter and leave
    # in any order: restore the original limit only when the last holder leaves, never while
    # another thread may still be deep in func_17.
    with _headroom_lock:
        if _headroom_holders == 0:
            _headroom_saved = sys.getrecursionlimit()
        _headroom_holders += 1
        if sys.getrecursionlimit() < limit:
            sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        with _headroom_lock:
            _headroom_holders -= 1
            if _headroom_holders == 0 and _headroom_saved is not None:
                sys.setrecursionlimit(_headroom_saved)
                _headroom_saved = None


_headroom_lock = threading.Lock()
_headroom_holders = 0
_headroom_saved: int | None = None


# ---------------------------------------------------------------- rendering


def render(e: Expr) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Lit):
        return repr(e.value)
    if isinstance(e, Call):
        parts = [render(a) for a in e.args] + [repr(p) for p in e.params]
        return f"{e.op}({', '.join(parts)})"
    if isinstance(e, Concat):
        return f"({render(e.left)} + {render(e.right)})"
    if isinstance(e, Method):
        return f"({render(e.expr)}).{e.name}()"
    raise ExprError(f"not an expression node: {e!r}")


def render_program(e: Expr, entry: str = "main_solution") -> str:
    return f"def {entry}(x):\n    return {render(e)}"


# ---------------------------------------------------------------- parsing


@overload
def parse_python(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse_python(source: str, mode: Literal["eval"]) -> ast.Expression: ...


def parse_python(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.Module | ast.Expression:
    """``ast.parse``, one call at a time across the process's threads.

    CPython 3.11 keeps the recursion counter of its AST-object builder in state shared by every
    thread. When a thread switch happens in the middle of building a tree (a garbage-collection
    finalizer running Python code is enough), two concurrent parses corrupt each other's counter
    and one of them raises ``SystemError: AST constructor recursion depth mismatch`` on perfectly
    good source. The scorer parses from a thread pool, so every parse in opgen goes through here.
    The lock is re-entrant: a finalizer that parses on the thread already holding it must not hang.
    """
    with _parse_lock:
        tree = ast.parse(source, mode=mode)
    assert isinstance(tree, (ast.Module, ast.Expression))
    return tree


_parse_lock = threading.RLock()


def parse(source: str, lib: OperatorLibrary = STUDY) -> Expr:
    """Parse expression source (``func_3(func_1(x, 2))``) into a tree; reject anything else."""
    try:
        tree = parse_python(source.strip(), mode="eval")
        return _from_ast(tree.body, "x", lib)
    except SyntaxError as exc:
        raise ExprError(f"not a Python expression: {exc.msg} in {_clip(source)}") from None
    except (RecursionError, MemoryError):
        # `x + x + ... + x` thousands of terms deep overflows the parser or our recursion; that is
        # bad input, not a crash.
        raise ExprError(f"expression nested too deeply: {_clip(source)}") from None


def _clip(source: str, limit: int = 200) -> str:
    return repr(source) if len(source) <= limit else repr(source[:limit]) + f"... ({len(source)} characters)"


def parse_program(source: str, entry: str = "main_solution", lib: OperatorLibrary = STUDY) -> Expr:
    """Parse ``def <entry>(x): return <expr>`` (the only statement of the function) into a tree."""
    try:
        module = parse_python(source)
        # Python binds the last definition of a name, so a program that defines the entry twice
        # runs the second one: parse that one too.
        defs = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == entry]
        if not defs:
            raise ExprError(f"no function {entry!r} in the program")
        return expression_of(defs[-1], lib)
    except SyntaxError as exc:
        raise ExprError(f"not a Python program: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"the expression of {entry!r} is nested too deeply") from None


def expression_of(fn: ast.FunctionDef, lib: OperatorLibrary = STUDY) -> Expr:
    """The returned expression of a one-argument function whose body is a single return."""
    if fn.decorator_list:
        # A decorator replaces the function: the returned expression would not be what runs.
        raise ExprError(f"{fn.name} must not be decorated")
    args = fn.args
    if len(args.args) != 1 or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise ExprError(f"{fn.name} must take exactly one argument")
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        raise ExprError(f"{fn.name} must consist of a single return statement")
    return _from_ast(body[0].value, args.args[0].arg, lib)


def _from_ast(node: ast.AST, var: str = "x", lib: OperatorLibrary = STUDY) -> Expr:
    if isinstance(node, ast.Name):
        if node.id != var:
            raise ExprError(f"unknown name {node.id!r} (only the input {var!r} may appear)")
        return Var()
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, str):
            raise ExprError(f"only string literals may stand as values, got {node.value!r}")
        return Lit(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return Concat(_from_ast(node.left, var, lib), _from_ast(node.right, var, lib))
    if isinstance(node, ast.Call):
        if node.keywords:
            raise ExprError("keyword arguments are not part of the grammar")
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr not in ops.METHODS:
                raise ExprError(f"unknown method .{func.attr}() (allowed: {', '.join(ops.METHODS)})")
            if node.args:
                raise ExprError(f"method .{func.attr}() takes no arguments in the grammar")
            return Method(_from_ast(func.value, var, lib), func.attr)
        if isinstance(func, ast.Name):
            try:
                op = lib.get(func.id)
            except ops.UnknownOperator as exc:
                raise ExprError(str(exc)) from None
            if any(isinstance(a, ast.Starred) for a in node.args):
                raise ExprError(f"{op.id}: starred arguments are not part of the grammar")
            if len(node.args) != op.arity:
                raise ExprError(f"{op.id} takes {op.arity} arguments {op.signature}, got {len(node.args)}")
            inputs = tuple(_from_ast(a, var, lib) for a in node.args[: op.n_inputs])
            params = tuple(_param(a, op.id) for a in node.args[op.n_inputs:])
            result = Call(op.id, inputs, params)
            _check_call(result, lib)
            return result
    raise ExprError(f"not part of the expression grammar: {ast.unparse(node)!r}")


def _param(node: ast.AST, op_id: str) -> ParamValue:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)) and not isinstance(node.value, bool):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    raise ExprError(f"{op_id}: parameters must be literal ints or strings, got {ast.unparse(node)!r}")


# ---------------------------------------------------------------- measures


def depth(e: Expr) -> int:
    """Longest root-to-leaf path counted in call, concatenation and method nodes."""
    kids = children(e)
    if not kids:
        return 0
    return 1 + max(depth(k) for k in kids)


def min_depth(e: Expr) -> int:
    """Shortest root-to-leaf path: equals ``depth`` exactly when every path has the same length."""
    kids = children(e)
    if not kids:
        return 0
    return 1 + min(min_depth(k) for k in kids)


def size(e: Expr) -> int:
    return sum(1 for _ in walk(e))


def ops_used(e: Expr) -> tuple[str, ...]:
    """Operator ids in order of first appearance in the rendered source."""
    seen: dict[str, None] = {}
    for node in walk(e):
        if isinstance(node, Call):
            seen.setdefault(node.op, None)
    return tuple(seen)


def op_calls(e: Expr) -> list[str]:
    return [n.op for n in walk(e) if isinstance(n, Call)]


def k_distinct(e: Expr) -> int:
    return len(ops_used(e))


def uses_x(e: Expr) -> bool:
    return any(isinstance(n, Var) for n in walk(e))


def structure(e: Expr) -> str:
    """A coarse shape label: 'atomic' (one operator call on leaves: ``x`` and literals, e.g. an
    interlace operator's literal second input or probe 1g's long literal), 'chain' (pure unary
    nesting on x) or 'mixed'."""
    calls = [n for n in walk(e) if isinstance(n, Call)]
    if len(calls) == 1 and isinstance(e, Call) and all(isinstance(a, (Var, Lit)) for a in e.args):
        return "atomic"
    node: Expr = e
    while isinstance(node, Call) and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, Var) and calls:
        return "chain"
    return "mixed"


@dataclass(frozen=True)
class TailDistance:
    """How far a parameterised call's trailing argument sits from its name in the rendered source."""

    op: str
    position: int  # index of this call among the expression's calls, pre-order
    chars: int  # characters between the end of the name and the start of the trailing argument
    call_tails: int  # other library calls whose parameter tails ("..., 2)") lie in between
    method_tails: int  # builtin method tails (".upper()") in between
    calls_between: int  # other library calls of any kind whose closing lies in between


def tail_distances(e: Expr) -> list[TailDistance]:
    """For each call with parameters: the distance from its name to its own trailing argument."""
    out: list[TailDistance] = []
    calls = [n for n in walk(e) if isinstance(n, Call)]
    for pos, node in enumerate(calls):
        if not node.params:
            continue
        inputs = ", ".join(render(a) for a in node.args)
        between = "(" + inputs + ", " + ", ".join(repr(p) for p in node.params[:-1])
        if len(node.params) > 1:
            between += ", "
        inner = [n for a in node.args for n in walk(a)]
        out.append(TailDistance(
            op=node.op,
            position=pos,
            chars=len(between),
            call_tails=sum(1 for n in inner if isinstance(n, Call) and n.params),
            method_tails=sum(1 for n in inner if isinstance(n, Method)),
            calls_between=sum(1 for n in inner if isinstance(n, Call)),
        ))
    return out


def canonical(e: Expr) -> str:
    """A canonical text of the tree (its rendering): equal trees, equal text."""
    return render(e)
