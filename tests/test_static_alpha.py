"""opgen/score/static.py's alpha-renamed recalls: a library body under a consistent renaming of the
names it binds is graded without running, with the sandbox's grade; anything not provably the
same function (capture, two names onto one, a renamed free name, attribute, keyword or constant,
``global``, other defaults) goes to the sandbox.

Provenance: ``three_ways`` (tests/test_static.py) grades through a sandbox that refuses to run
anything first, so a grade it returns came from the static path; ``goes_to_sandbox`` requires that
sandbox to have been asked.
"""

from __future__ import annotations

import ast
import builtins

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_static import NoRun, goes_to_sandbox, gt_of, ra, three_ways

from opgen import ops
from opgen.score import diagnose as D
from opgen.score import static as S
from opgen.score.judge import grade_in_process
from opgen.score.sandbox import Sandbox, Unit
from opgen.score.settings import GradeSettings


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=2.0) as b:
        yield b


def renamed(op: str, mapping: dict[str, str], comment: bool = True) -> str:
    """The operator's source with ``mapping`` applied to every Name, parameter and nested function
    name (a consistent renaming when ``mapping`` is injective onto fresh names), reformatted."""
    tree = ast.parse(ops.get(op).source)
    fn = tree.body[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = mapping.get(node.id, node.id)
        elif isinstance(node, ast.arg):
            node.arg = mapping.get(node.arg, node.arg)
        elif isinstance(node, ast.FunctionDef) and node is not fn:
            node.name = mapping.get(node.name, node.name)
    text = ast.unparse(tree) + "\n"
    if comment:  # formatting and comments are never seen
        head, rest = text.split("\n", 1)
        text = head + "  # recalled\n" + rest.replace("\n    return", "\n\n    return", 1)
    return text


def expr_of(op: str) -> str:
    o = ops.get(op)
    if o.n_inputs == 2:
        return f"{op}(x, func_3(x))"
    if not o.params:
        return f"{op}(x)"
    return f"{op}(x, 2)" if o.params[0].kind == "int" else f"{op}(x, 'ab')"


@pytest.mark.parametrize("op,mapping", [
    ("func_17", {"s": "text"}),  # recursive: the recursion's name stays
    ("func_20", {"s1": "left", "s2": "right"}),
    ("func_23", {"s": "word", "depth": "k", "t": "w", "d": "budget", "search": "dfs", "has_digit": "digit_in",
                 "candidate": "cand", "found": "hit", "result": "res", "ch": "c"}),
    ("func_7", {"result": "out", "len1": "n1", "len2": "n2", "i": "j", "s1": "a", "s2": "b"}),
    ("func_11", {"shift_char": "rot", "ch": "c", "shift": "k", "s": "text"}),
    ("func_18", {"_": "i", "result": "acc"}),
    ("func_5", {"s": "pre", "pre": "s"}),  # a swap is a bijection
    ("func_0", {"multiplier": "m", "L": "size", "i": "k"}),  # `gcd` (imported) stays
    ("func_12", {"mapping": "table"}),
])
def test_renamed_recalls_are_graded_statically_with_the_sandboxs_grade(box, op, mapping):
    gt = gt_of(expr_of(op), "a1bc" if op != "func_23" else "abc")
    text = ra(gt, {op: renamed(op, mapping)})
    g = three_ways(box, gt, text)  # the first of the three ran nothing
    assert g["score"] == 1.0 and g["structure_ok"], g
    assert all(r["verdict"] == "correct" for r in g["recalls"]), g["recalls"]


def test_renamed_parameters_name_themselves_in_arity_errors(box):
    gt = gt_of("func_1(func_3(x), 2)", "ab")
    text = ra(gt, {"func_1": renamed("func_1", {"s": "text", "n": "times"})},
              main="def main_solution(x):\n    return func_1(func_3(x))")
    g = three_ways(box, gt, text)
    assert g["tasks"][0]["detail"] == "TypeError: func_1() missing 1 required positional argument: 'times'"


def test_a_renamed_chimera_is_the_body_it_holds(box):
    gt = gt_of("func_9(func_3(x))", "bca")
    body = renamed("func_22", {"s": "w"})
    g = three_ways(box, gt, ra(gt, {"func_9": body.replace("def func_22(", "def func_9(", 1)}))
    assert g["recalls"][0]["verdict"] == "chimera" and g["recalls"][0]["chimera_of"] == "func_22"


@pytest.mark.parametrize("gt_expr,op,source", [
    # capture: a local renamed to a builtin the body uses, to one it does not use, to another
    # operator's name, to the function's own name, to an entry's name
    ("func_9(func_3(x))", "func_3", "def func_3(sorted):\n    return ''.join(sorted(sorted))\n"),
    ("func_9(func_3(x))", "func_3", "def func_3(len):\n    return ''.join(sorted(len))\n"),
    ("func_3(func_9(x))", "func_9", "def func_9(func_3):\n    return func_3 + func_3[::-1]\n"),
    ("func_3(func_9(x))", "func_9", "def func_9(func_9):\n    return func_9 + func_9[::-1]\n"),
    ("func_3(func_9(x))", "func_9", "def func_9(main_solution):\n    return main_solution + main_solution[::-1]\n"),
    ("func_3(func_17(x))", "func_17",
     "def func_17(func_17):\n    if func_17 == '':\n        return func_17\n"
     "    return func_17(func_17[1:]) + func_17[0]\n"),
    # two names onto one
    ("func_7(x, func_3(x))", "func_7", renamed("func_7", {"len1": "n", "len2": "n"})),
    ("func_20(x, func_3(x))", "func_20", renamed("func_20", {"s2": "s1"}).replace("s1, s1)", "s1, s2)", 1)),
    # a renamed free name, attribute, constant; a partial renaming
    ("func_3(func_7(x, x))", "func_7", renamed("func_7", {"len": "size"})),
    ("func_3(func_4(x))", "func_4", renamed("func_4", {"s": "t"}).replace("t.split()", "t.rsplit()")),
    ("func_3(func_14(x))", "func_14", renamed("func_14", {"ch": "c"}).replace("c * 2", "c * 3")),
    ("func_3(func_17(x))", "func_17", renamed("func_17", {"s": "t"}).replace("t[0]", "s[0]")),
    ("func_3(func_17(x))", "func_17", renamed("func_17", {"func_17": "func_3"})),  # the recursion's name
    # global and nonlocal declarations, other defaults, annotations, a non-ASCII name
    ("func_3(func_19(x, 2))", "func_19", "def func_19(t, k):\n    global count\n    count = 0\n"
                                         "    while count < k and t:\n        t = t[1:] + t[0]\n        count += 1\n"
                                         "    return t\n"),
    ("func_3(func_1(x, 2))", "func_1", "def func_1(t, k=3):\n    return t * k\n"),
    ("func_3(func_1(x, 2))", "func_1", "def func_1(t: str, k: int):\n    return t * k\n"),
    ("func_3(func_9(x))", "func_9", "def func_9(\u0161):\n    return \u0161 + \u0161[::-1]\n"),
    ("func_3(func_9(x))", "func_9", "def func_9(__s):\n    return __s + __s[::-1]\n"),
])
def test_near_misses_go_to_the_sandbox(box, gt_expr, op, source):
    gt = gt_of(gt_expr, "ab1c")
    goes_to_sandbox(box, gt, ra(gt, {op: source}))


def test_keywords_attributes_and_imports_are_never_renamed():
    # The library has no keyword argument: the walk itself, on a library-shaped pair.
    lib = ast.parse("def f(s):\n    return g(s, key=s.strip())\n").body[0]
    for got, same in [("def f(t):\n    return g(t, key=t.strip())\n", True),
                      ("def f(t):\n    return g(t, k=t.strip())\n", False),
                      ("def f(t):\n    return g(t, key=t.lstrip())\n", False),
                      ("def f(t):\n    return g(t, key=t.strip(), x=1)\n", False)]:
        walk = S._AlphaWalk(frozenset({"s"}), lib)
        try:
            walk.node(lib, ast.parse(got).body[0])
            matched = True
        except S._Mismatch:
            matched = False
        assert matched is same, got
    # func_0's `from math import gcd` binds gcd locally, but the import spells it: it stays
    _, renameable, fixed = S._alpha_facts("func_0")
    assert "gcd" in fixed and "gcd" not in renameable
    code = renamed("func_0", {"gcd": "g"}) + "def main_solution(x):\n    return func_0(x)\n"
    assert S.evaluate([Unit(code, (("main_solution", ("abcd",)),))], NoRun()) is None


def test_every_library_name_is_either_renameable_or_kept():
    for op in ops.OPERATORS:
        fn, renameable, fixed = S._alpha_facts(op.id)
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
                {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
        assert names <= renameable | fixed, op.id
        assert not renameable & fixed
        assert not any(hasattr(builtins, n) for n in renameable), op.id
        assert op.id in fixed


# ------------------------------------------------------------------ differential, property-based

POOL = ("a", "b", "c", "u", "v", "w", "acc", "tmp", "q1", "q2", "text", "word", "item", "k", "s", "t", "ch")
CAPTURE = ("len", "sorted", "join", "range", "func_3", "main_solution", "str", "chr")


def _grade(gt: dict, text: str, sandbox) -> dict:
    D._VERDICTS.clear()
    return grade_in_process(gt, text, sandbox=sandbox)


@st.composite
def consistent(draw):
    op = draw(st.sampled_from([o.id for o in ops.OPERATORS]))
    _, renameable, fixed = S._alpha_facts(op)
    names = sorted(renameable)
    pool = sorted(set(POOL) - fixed)
    targets = draw(st.permutations(pool))[:len(names)]
    return op, dict(zip(names, targets))


@settings(max_examples=30)
@given(consistent())
def test_random_consistent_renamings_grade_statically_as_the_sandbox_does(box, case):
    op, mapping = case
    gt = gt_of(expr_of(op), "ab1c")
    text = ra(gt, {op: renamed(op, mapping, comment=False)})
    g = three_ways(box, gt, text)
    assert g["score"] == 1.0


@st.composite
def inconsistent(draw):
    op = draw(st.sampled_from([o.id for o in ops.OPERATORS]))
    fn, renameable, fixed = S._alpha_facts(op)
    how = draw(st.sampled_from(["merge", "capture", "free", "partial"]))
    names = sorted(renameable)
    if how == "merge" and len(names) >= 2:
        a, b = draw(st.permutations(names))[:2]
        return op, renamed(op, {a: b}, comment=False)
    if how == "capture":
        return op, renamed(op, {draw(st.sampled_from(names)): draw(st.sampled_from(CAPTURE))}, comment=False)
    if how == "free" and fixed - {op}:
        kept = draw(st.sampled_from(sorted(fixed - {op, "math"})))
        return op, renamed(op, {kept: "zz"}, comment=False).replace(f".{kept}(", ".zz(")
    # one occurrence of a bound name renamed, the others kept
    old = draw(st.sampled_from(names))
    text = renamed(op, {}, comment=False)
    spots = [i for i in range(len(text)) if text.startswith(old, i)
             and not (text[i - 1].isalnum() or text[i - 1] in "_.'")
             and not (text[i + len(old)].isalnum() or text[i + len(old)] == "_")]
    i = draw(st.sampled_from(spots)) if spots else 0
    return op, text[:i] + "zz" + text[i + len(old):] if spots else text


@settings(max_examples=40)
@given(inconsistent())
def test_random_inconsistent_renamings_decline_or_agree_with_the_sandbox(box, case):
    op, source = case
    gt = gt_of(expr_of(op), "ab1c")
    text = ra(gt, {op: source})
    D._VERDICTS.clear()
    ran = grade_in_process(gt, text, sandbox=box, settings=GradeSettings(static=False))
    try:
        alone = _grade(gt, text, NoRun())
    except AssertionError:
        return  # declined: the sandbox grades it
    assert alone == ran
