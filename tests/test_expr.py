"""Typed expression trees: round trips, evaluation against the rendered program, the grammar's
borders, the measures (checked against the rendered text through `ast`), and the length limit."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from opgen import expr as E
from opgen import ops
from opgen.expr import Call, Concat, Lit, Method, Var

# Literal contents that stress rendering: both quote kinds, backslashes, control characters,
# unicode that case mapping changes, non-BMP, a lone surrogate, and text that looks like a call.
AWKWARD = "ab xyz'\"\\\n\t\x00\x7fßİé\u0301\u0660\U0001f600\ud800«»func_3(x, 2)).upper()+"

literal_text = st.one_of(st.text(alphabet=AWKWARD, max_size=8), st.text(max_size=4))


def _param(p: ops.Param) -> st.SearchStrategy:
    if p.kind == "int":
        return st.one_of(st.integers(p.lo, p.hi), st.integers(-3, 5))
    if p.kind == "choice":
        return st.one_of(st.sampled_from(p.choices), literal_text)
    return st.one_of(st.text(alphabet=string.ascii_lowercase, min_size=p.lo, max_size=p.hi), literal_text)


def _calls(children: st.SearchStrategy) -> st.SearchStrategy:
    def for_op(op: ops.Operator) -> st.SearchStrategy:
        return st.builds(lambda a, p: Call(op.id, a, p),
                         st.tuples(*[children] * op.n_inputs), st.tuples(*(_param(p) for p in op.params)))
    return st.sampled_from(ops.OPERATORS).flatmap(for_op)


leaves = st.one_of(st.just(Var()), st.builds(Lit, literal_text))
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        _calls(children),
        st.builds(Concat, children, children),
        st.builds(Method, children, st.sampled_from(ops.METHODS)),
    ),
    max_leaves=10,
)
inputs = st.one_of(st.text(alphabet=AWKWARD, max_size=12), st.text(max_size=6))
PROPS = settings(max_examples=150)


# ------------------------------------------------------------------ rendering and parsing

RENDERED = [
    (E.call("func_5", E.call("func_3", E.call("func_1", Var(), params=(2,))), params=("ab",)),
     "func_5(func_3(func_1(x, 2)), 'ab')"),
    (Concat(Var(), Lit("abc")), "(x + 'abc')"),
    (Method(E.call("func_2", Var()), "upper"), "(func_2(x)).upper()"),
    (E.call("func_7", Var(), Lit("q")), "func_7(x, 'q')"),
    (E.call("func_13", Var(), params=("|",)), "func_13(x, '|')"),
    (Lit("it's"), '"it\'s"'),
]


@pytest.mark.parametrize(("tree", "text"), RENDERED, ids=[t for _, t in RENDERED])
def test_render_is_byte_exact_with_the_native_style(tree, text):
    assert E.render(tree) == text
    assert E.parse(text) == tree


def test_render_program_is_the_native_main_solution():
    tree = E.parse("func_3(func_1(x, 2))")
    assert E.render_program(tree) == "def main_solution(x):\n    return func_3(func_1(x, 2))"
    assert E.render_program(tree, "main_solution_2").startswith("def main_solution_2(x):\n")


@pytest.mark.slow
@PROPS
@given(trees)
def test_render_parse_render_is_identity(tree):
    text = E.render(tree)
    back = E.parse(text)
    assert back == tree
    assert E.render(back) == text
    assert E.canonical(back) == text


@PROPS
@given(trees, st.sampled_from(["main_solution", "main_solution_3"]))
def test_parse_program_inverts_render_program(tree, entry):
    program = E.render_program(tree, entry)
    assert E.parse_program(program, entry) == tree
    with_sources = "\n\n".join(ops.get(o).source for o in E.ops_used(tree)) + "\n\n" + program
    assert E.parse_program(with_sources, entry) == tree


def _exec_program(tree, x: str) -> str:
    """What a model's answer would compute: the used sources, then main_solution, in a fresh namespace."""
    program = "".join(ops.get(o).source + "\n\n" for o in E.ops_used(tree)) + E.render_program(tree)
    namespace: dict = {}
    exec(compile(program, "<program>", "exec"), namespace)
    return namespace["main_solution"](x)


@PROPS
@given(trees, inputs)
def test_evaluate_equals_executing_the_rendered_program(tree, x):
    with E.recursion_headroom():
        try:
            value = E.evaluate(tree, x, max_len=20_000)
        except E.OutputTooLong:
            assume(False)
        assert _exec_program(tree, x) == value


def test_evaluate_known_values():
    assert E.evaluate(E.parse("func_5(func_3(func_1(x, 2)), 'ab')"), "cab") == "abaabbcc"
    assert E.evaluate(E.parse("(func_2(x)).upper()"), "banana") == "BNN"
    assert E.evaluate(E.parse("(x + 'abc')"), "") == "abc"
    assert E.evaluate(E.parse("func_20(x, (x).swapcase())"), "aB") == "aABb"


def test_evaluate_refuses_methods_outside_the_grammar():
    with pytest.raises(E.ExprError, match="unknown method .__class__"):
        E.evaluate(Method(Var(), "__class__"), "abc")


# ------------------------------------------------------------------ the grammar's borders

REJECTED = [
    "", "   ", "x; x", "import os", "__import__('os')", "lambda: x", "(lambda s: s)(x)",
    "x.__class__()", "x.__class__", "x.upper", "x.join(x)", "x.upper(1)", "x.encode()", "x.replace('a', 'b')",
    "os.system('ls')", "func_3.__globals__", "y", "func_3(y)", "print(x)", "eval('x')", "open('f').read()",
    "func_99(x)", "func_3()", "func_3(x, x)", "func_1(x)", "func_1(x, 2, 3)", "func_7(x)",
    "func_3(s=x)", "func_1(x, n=2)", "func_3(*[x])", "func_3(**{'s': x})",
    "func_1(x, 2.0)", "func_1(x, True)", "func_1(x, None)", "func_1(x, '2')", "func_5(x, 2)",
    "func_1(x, len(x))", "func_1(x, 1 + 1)", "func_1(x, +2)", "func_1(x, -True)", "func_5(x, 'a' + 'b')",
    "func_5(x, x)", "func_13(x, ('-'))[0]",
    "f'{x}'", "f'a'", "b'x'", "1", "x * 2", "x - x", "-x", "x[0]", "x[::-1]", "[x]", "(x, x)",
    "{x}", "x if x else x", "not x", "x and x", "(x := 'a')", "x == x", "...", "None",
    "func_3(x) + 1", "x.upper().__len__()", "yield x", "await x", "x\nx",
]


@pytest.mark.parametrize("source", REJECTED)
def test_parse_rejects_outside_the_grammar(source):
    with pytest.raises(E.ExprError):
        E.parse(source)


def test_parse_errors_name_the_problem():
    cases = {
        "func_99(x)": "unknown operator 'func_99'",
        "func_1(x)": "func_1 takes 2 arguments (s, n), got 1",
        "func_3(s=x)": "keyword arguments",
        "func_1(x, len(x))": "func_1: parameters must be literal",
        "func_5(x, 2)": "func_5: parameter pre must be letters",
        "y": "unknown name 'y'",
        "x.encode()": "unknown method .encode()",
        "lambda: x": "not part of the expression grammar",
        "func_3(": "not a Python expression",
        "func_3(*[x])": "starred",
    }
    for source, message in cases.items():
        with pytest.raises(E.ExprError, match=re.escape(message)):
            E.parse(source)


def test_parse_deeply_nested_input_is_an_expr_error_not_a_crash():
    for source in [" + ".join(["x"] * 30_000), "(" * 500 + "x" + ")" * 500,
                   "func_3(" * 300 + "x" + ")" * 300, "func_1(x, " + "9" * 5000 + ")"]:
        with pytest.raises(E.ExprError):
            E.parse(source)


def test_parse_accepts_the_grammar_written_loosely():
    assert E.parse("  x.upper()  ") == Method(Var(), "upper")
    assert E.parse("x + 'a'") == Concat(Var(), Lit("a"))
    assert E.parse("func_1(x, -2)") == Call("func_1", (Var(),), (-2,))
    assert E.parse("func_3(x,)") == Call("func_3", (Var(),))


PROGRAMS_REJECTED = [
    ("def other(x):\n    return x\n", "no function 'main_solution'"),
    ("def main_solution(x, y):\n    return x\n", "exactly one argument"),
    ("def main_solution(*x):\n    return x\n", "exactly one argument"),
    ("def main_solution(x):\n    y = x\n    return y\n", "single return"),
    ("def main_solution(x):\n    return\n", "single return"),
    ("def main_solution(x):\n    print(x)\n", "single return"),
    ("@staticmethod\ndef main_solution(x):\n    return x\n", "decorated"),
    ("def main_solution(x):\n    return func_3(y)\n", "unknown name 'y'"),
    ("def main_solution(x:\n    return x\n", "not a Python program"),
    ("main_solution = lambda x: x\n", "no function"),
]


@pytest.mark.parametrize(("program", "message"), PROGRAMS_REJECTED)
def test_parse_program_rejects(program, message):
    with pytest.raises(E.ExprError, match=message):
        E.parse_program(program)


def test_parse_program_reads_the_definition_python_would_run():
    program = ("def main_solution(x):\n    return x\n\n"
               "def main_solution(x):\n    '''Doc.'''\n    return func_3(x)\n")
    assert E.parse_program(program) == Call("func_3", (Var(),))
    ns: dict = {}
    exec(ops.get("func_3").source + "\n" + program, ns)
    assert ns["main_solution"]("cba") == E.evaluate(E.parse_program(program), "cba")


def test_parse_program_accepts_another_argument_name():
    assert E.parse_program("def main_solution(s):\n    return func_3(s)\n") == Call("func_3", (Var(),))


def test_call_builder_checks_arity_and_param_types():
    with pytest.raises(E.ExprError, match="func_1 takes 2"):
        E.call("func_1", Var())
    with pytest.raises(E.ExprError, match="parameter n must be int"):
        E.call("func_1", Var(), params=("2",))
    with pytest.raises(ops.UnknownOperator):
        E.call("func_42", Var())


# ------------------------------------------------------------------ measures, independently via ast


def _lib_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name)


def _inputs(node: ast.Call) -> list[ast.AST]:
    return node.args[: ops.get(node.func.id).n_inputs]


def _kids(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.Call):
        return _inputs(node) if _lib_call(node) else [node.func.value]
    return []


def _ast_depth(node: ast.AST, pick) -> int:
    kids = _kids(node)
    return 0 if not kids else 1 + pick(_ast_depth(k, pick) for k in kids)


def _preorder(node: ast.AST):
    yield node
    for k in _kids(node):
        yield from _preorder(k)


@PROPS
@given(trees)
def test_measures_agree_with_the_rendered_text(tree):
    root = ast.parse(E.render(tree), mode="eval").body
    nodes = list(_preorder(root))
    assert E.depth(tree) == _ast_depth(root, max)
    assert E.min_depth(tree) == _ast_depth(root, min)
    assert E.size(tree) == len(nodes)
    calls = sorted((n for n in ast.walk(root) if _lib_call(n)), key=lambda n: (n.lineno, n.col_offset))
    first_seen = list(dict.fromkeys(n.func.id for n in calls))
    assert list(E.ops_used(tree)) == first_seen
    assert E.op_calls(tree) == [n.func.id for n in calls]
    assert E.k_distinct(tree) == len(set(first_seen))
    assert E.uses_x(tree) == any(isinstance(n, ast.Name) and n.id == "x" for n in ast.walk(root))
    assert [type(n).__name__ for n in E.walk(tree)] == [
        "Var" if isinstance(n, ast.Name) else "Lit" if isinstance(n, ast.Constant)
        else "Concat" if isinstance(n, ast.BinOp) else "Call" if _lib_call(n) else "Method" for n in nodes]


def test_measures_known_values():
    t = E.parse("func_5(func_3(func_1(x, 2)), 'ab')")
    assert (E.depth(t), E.min_depth(t), E.size(t), E.ops_used(t), E.k_distinct(t), E.uses_x(t)) == (
        3, 3, 4, ("func_5", "func_3", "func_1"), 3, True)
    u = E.parse("func_7(func_3(x), 'lit')")
    assert (E.depth(u), E.min_depth(u)) == (2, 1)
    assert not E.uses_x(E.parse("func_3('abc')"))
    assert E.ops_used(E.parse("func_3(func_9(func_3(x)))")) == ("func_3", "func_9")
    assert E.op_calls(E.parse("func_3(func_9(func_3(x)))")) == ["func_3", "func_9", "func_3"]
    assert E.depth(Var()) == E.depth(Lit("a")) == 0


@pytest.mark.parametrize(("source", "label"), [
    ("func_3(x)", "atomic"),
    ("func_1(x, 2)", "atomic"),
    ("func_7(x, x)", "atomic"),
    ("func_3(func_1(x, 2))", "chain"),
    ("func_3(func_3(func_3(x)))", "chain"),
    ("func_3('abc')", "atomic"),  # one call on leaves (probe 1g's long literal, issue 18 item 7)
    ("func_7(x, 'ab')", "atomic"),  # an interlace operator's literal second input
    ("func_7(x, func_3(x))", "mixed"),
    ("func_3(func_7(x, x))", "mixed"),
    ("(func_3(x)).upper()", "mixed"),
    ("func_3((x).upper())", "mixed"),
    ("func_3((x + 'a'))", "mixed"),
    ("x", "mixed"),
])
def test_structure_labels(source, label):
    assert E.structure(E.parse(source)) == label


@PROPS
@given(trees)
def test_structure_chain_means_unary_calls_all_the_way_down_to_x(tree):
    label = E.structure(tree)
    calls = [n for n in E.walk(tree) if isinstance(n, Call)]
    pure_chain = all((isinstance(n, Call) and len(n.args) == 1) or isinstance(n, Var) for n in E.walk(tree))
    if label == "atomic":
        assert len(calls) == 1 and isinstance(tree, Call) and all(isinstance(a, (Var, Lit)) for a in tree.args)
    elif label == "chain":
        assert pure_chain and len(calls) >= 2
    else:
        assert label == "mixed" and not (pure_chain and len(calls) >= 2)


def _char_offsets(text: str):
    """ast columns are UTF-8 byte offsets; map them to character offsets of this one-line text."""
    cut = {}
    pos = 0
    for i, ch in enumerate(text):
        cut[pos] = i
        pos += len(ch.encode("utf-8", "surrogatepass"))
    cut[pos] = len(text)
    return cut


@PROPS
@given(trees)
def test_tail_distances_match_positions_in_the_rendered_string(tree):
    text = E.render(tree)
    assume("\n" not in text)  # repr keeps literals on one line; this guards the column mapping
    cut = _char_offsets(text)
    root = ast.parse(text, mode="eval").body
    calls = [n for n in _preorder(root) if _lib_call(n)]
    expected = []
    for pos, node in enumerate(calls):
        op = ops.get(node.func.id)
        if not op.params:
            continue
        name_end = cut[node.func.end_col_offset]
        tail_start = cut[node.args[-1].col_offset]
        assert text[tail_start:].startswith(repr(ast.literal_eval(node.args[-1])))
        inner = [n for n in _preorder(node) if n is not node]

        def between(at: int) -> bool:
            return name_end < at < tail_start  # noqa: B023 - evaluated immediately

        expected.append(E.TailDistance(
            op=op.id, position=pos, chars=tail_start - name_end,
            call_tails=sum(1 for n in inner if _lib_call(n) and ops.get(n.func.id).params
                           and between(cut[n.args[-1].col_offset])),
            method_tails=sum(1 for n in inner if isinstance(n, ast.Call) and not _lib_call(n)
                             and between(cut[n.func.value.end_col_offset])),
            calls_between=sum(1 for n in inner if _lib_call(n) and between(cut[n.end_col_offset] - 1)),
        ))
    assert E.tail_distances(tree) == expected


def test_tail_distances_known_values():
    t = E.parse("func_24(func_1((x).upper(), 3), 2)")
    d = E.tail_distances(t)
    assert [(x.op, x.position, x.chars, x.call_tails, x.method_tails, x.calls_between) for x in d] == [
        ("func_24", 0, len("(func_1((x).upper(), 3), "), 1, 1, 1),
        ("func_1", 1, len("((x).upper(), "), 0, 1, 0),
    ]
    assert E.tail_distances(E.parse("func_3(func_7(x, x))")) == []


# ------------------------------------------------------------------ the length limit


def _values(tree, x: str) -> list[str]:
    """Every node's value in an unbounded evaluation."""
    return [E.evaluate(n, x) for n in E.walk(tree)]


@pytest.mark.slow
@settings(max_examples=200)
@given(trees, inputs, st.integers(0, 40))
def test_output_too_long_exactly_when_some_value_exceeds_the_limit(tree, x, limit):
    with E.recursion_headroom():
        try:
            E.evaluate(tree, x, max_len=5_000)
        except E.OutputTooLong:
            assume(False)
        longest = max(len(v) for v in _values(tree, x))
        if longest > limit:
            with pytest.raises(E.OutputTooLong) as info:
                E.evaluate(tree, x, max_len=limit)
            assert info.value.limit == limit and info.value.length > limit
        else:
            assert E.evaluate(tree, x, max_len=limit) == E.evaluate(tree, x)


@pytest.mark.parametrize(("source", "length"), [
    ("func_1(x, 4)", 40), ("func_18(x, 3)", 30), ("func_13(x, '--')", 28), ("func_15(x)", 30),
    ("func_14(x)", 20), ("(x + x)", 20), ("func_9(x)", 20),
])
def test_output_too_long_reports_the_exact_length(source, length):
    tree = E.parse(source)
    assert len(E.evaluate(tree, "abcdefghij")) == length
    with pytest.raises(E.OutputTooLong) as info:
        E.evaluate(tree, "abcdefghij", max_len=length - 1)
    assert info.value.length == length
    assert E.evaluate(tree, "abcdefghij", max_len=length) == E.evaluate(tree, "abcdefghij")


def test_output_too_long_refuses_before_allocating():
    # 10**15 characters would not fit in memory: the limit must refuse before the call runs.
    with pytest.raises(E.OutputTooLong):
        E.evaluate(E.parse("func_1(x, 1000000000000000)"), "ab", max_len=1000)
    with pytest.raises(E.OutputTooLong):
        E.evaluate(E.parse("func_18(func_1(func_1(func_1(x, 4), 4), 4), 4)"), "a" * 100, max_len=10_000)


def test_input_longer_than_the_limit_is_refused():
    with pytest.raises(E.OutputTooLong):
        E.evaluate(Var(), "abcdef", max_len=5)


# ------------------------------------------------------------------ recursion headroom


def test_headroom_stays_while_another_thread_still_holds_it():
    import sys
    import threading

    base = sys.getrecursionlimit()
    assert base < 20_000, "the test needs the default limit"
    entered, release, seen = threading.Event(), threading.Event(), []

    def worker():
        with E.recursion_headroom():
            entered.set()
            release.wait(30)
            seen.append(sys.getrecursionlimit())
            try:
                seen.append(len(ops.call("func_17", "a" * 5_000)))
            except RecursionError:
                seen.append("RecursionError")

    t = threading.Thread(target=worker)
    with E.recursion_headroom():  # holds the headroom first and leaves while the worker is inside
        t.start()
        assert entered.wait(30)
    release.set()
    t.join(30)
    assert seen == [20_000, 5_000]
    assert sys.getrecursionlimit() == base


def test_headroom_nested_restores_the_original_limit():
    import sys

    base = sys.getrecursionlimit()
    with E.recursion_headroom(), E.recursion_headroom(30_000):
        assert sys.getrecursionlimit() == 30_000
    assert sys.getrecursionlimit() == base


@pytest.mark.slow
def test_parsing_from_many_threads_never_trips_cpythons_shared_ast_counter():
    """CPython 3.11 shares the AST builder's recursion counter between threads; a thread switch in the
    middle of a parse (here: finalizers that release the GIL, run by the garbage collector) made the
    scorer's thread pool raise ``SystemError: AST constructor recursion depth mismatch`` in CI."""
    import gc
    import threading
    import time

    class Finalized:
        def __del__(self):
            time.sleep(0)  # gives the GIL away in the middle of whatever the collector interrupted

    program = "def main_solution(x):\n    return " + "func_3(" * 30 + "x" + ")" * 30
    errors: list[BaseException] = []

    def parse_many():
        for _ in range(1000):
            a, b = Finalized(), Finalized()
            a.other, b.other = b, a  # a cycle: only the collector frees it, at an arbitrary moment
            del a, b
            try:
                E.parse_program(program)
            except SystemError as exc:
                errors.append(exc)
                return

    thresholds = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    try:
        threads = [threading.Thread(target=parse_many) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.set_threshold(*thresholds)
    assert not errors, errors[0]


def test_every_parse_in_the_package_takes_the_lock():
    """The test above holds for ``expr.parse_python``; a bare ``ast.parse`` elsewhere (the static
    path's operator sources, parsed from the scorer's thread pool) raised that SystemError in a
    random-order run of the fast loop. The sandbox worker (score/jail, standard library only, one
    thread) is the one exception."""
    root = Path(E.__file__).parent
    bare = []
    for path in sorted(root.rglob("*.py")):
        if "jail" in path.relative_to(root).parts or path == Path(E.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast":
                bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not bare, f"ast.parse outside expr.parse_python: {bare}"


def test_node_constructors_build_what_the_dataclasses_would():
    import dataclasses

    cases = [(E.Var, (), {}), (E.Var, ("y",), {}), (E.Lit, ("ab",), {}), (E.Call, ("func_3", (E.Var(),)), {}),
             (E.Call, ("func_1", (E.Var(),)), {"params": (2,)}), (E.Concat, (E.Var(), E.Lit("q")), {}),
             (E.Method, (E.Var(),), {"name": "upper"})]
    for cls, args, kwargs in cases:
        made = cls(*args, **kwargs)
        generated = object.__new__(cls)
        fields = dataclasses.fields(cls)
        values = [*args, *[kwargs.get(f.name, f.default) for f in fields[len(args):]]]
        for f, value in zip(fields, values):
            object.__setattr__(generated, f.name, value)
        assert made == generated and hash(made) == hash(generated) and repr(made) == repr(generated)
        assert list(vars(made)) == [f.name for f in fields]
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.__setattr__(fields[0].name, None)
    assert E.render(E.Call("func_1", (E.Concat(E.Var(), E.Lit("ab")),), (3,))) == "func_1((x + 'ab'), 3)"
