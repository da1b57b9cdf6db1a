"""diagnose.rebinds_behind (one typed pass) against the walk it replaced, kept here as the reference;
and the static path's tree of a program against ``ast.parse`` of its text."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from opgen import ops
from opgen.score import diagnose as D
from opgen.score import static as S
from opgen.score.sandbox import Unit

HOSTILE = Path(__file__).parent / "hostile"


def reference(stmt: ast.stmt, entry: str) -> bool:
    """The walk as called_def did it over the whole tree, restricted to one top-level statement."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and node.id in D._DYNAMIC_NAMES:
            return True
        if isinstance(node, ast.Attribute) and (node.attr.startswith("__") or node.attr in D._FRAME_ATTRS):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m.split(".")[0] in D._DYNAMIC_MODULES for m in modules):
                return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and entry in node.names:
            return True
        if node is not stmt and D._binds(node, entry):
            return True
    return False


SNIPPETS = [
    "def main_solution(x):\n    return func_3(x)\n",
    "def f(x):\n    main_solution = x\n    return x\n",
    "def f(x):\n    for main_solution in x:\n        pass\n",
    "def f(x):\n    with open(x) as main_solution:\n        pass\n",
    "def f(x):\n    with g(x) as main_solution:\n        pass\n",
    "def f(x):\n    del main_solution\n",
    "def f(x):\n    return (main_solution := x)\n",
    "def f(x):\n    global main_solution\n",
    "def f(x):\n    nonlocal main_solution\n",
    "def f(x):\n    def main_solution(y):\n        return y\n",
    "def f(x):\n    class main_solution:\n        pass\n",
    "def f(x):\n    import main_solution\n",
    "def f(x):\n    import os as main_solution\n",
    "def f(x):\n    from os import *\n",
    "def f(x):\n    import sys\n",
    "def f(x):\n    from importlib import util\n",
    "def f(x):\n    import collections.abc\n",
    "def f(x):\n    try:\n        pass\n    except E as main_solution:\n        pass\n",
    "def f(x):\n    match x:\n        case [*main_solution]:\n            pass\n",
    "def f(x):\n    match x:\n        case {**main_solution}:\n            pass\n",
    "def f(x):\n    match x:\n        case y as main_solution:\n            pass\n",
    "def f(x):\n    return x.__class__\n",
    "def f(x):\n    return x.f_back\n",
    "def f(x):\n    return globals()\n",
    "def f(globals):\n    return globals\n",
    "def f(x):\n    return [main_solution for main_solution in x]\n",
    "def f(x):\n    return lambda main_solution: main_solution\n",
    "def f(x, main_solution=1):\n    return main_solution\n",
    "main_solution = lambda x: x\n",
    "x = main_solution\n",
    "async def f(x):\n    async with g() as main_solution:\n        pass\n",
    "async def f(x):\n    async for main_solution in g():\n        pass\n",
    "class C:\n    main_solution = 1\n",
    "if True:\n    def main_solution(x):\n        return x\n",
    "@d\ndef main_solution(x):\n    return x\n",
    "main_solution += 1\n",
    "main_solution: int = 1\n",
    "def f(x):\n    return 'main_solution __ globals'\n",
]


def _programs() -> list[str]:
    out = list(SNIPPETS)
    out += [p.read_text() for p in sorted(HOSTILE.glob("*.py"))]
    out += [op.source for op in ops.OPERATORS]
    return out


@pytest.mark.parametrize("entry", ["main_solution", "x", "f", "globals", "s"])
def test_rebinds_behind_is_the_walk_it_replaced(entry):
    seen = 0
    for text in _programs():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for stmt in tree.body:
            assert D.rebinds_behind(stmt, entry) == reference(stmt, entry), (entry, ast.unparse(stmt)[:200])
            seen += 1
    assert seen > 100


def test_the_snippets_reach_both_answers():
    verdicts = {reference(ast.parse(t).body[0], "main_solution") for t in SNIPPETS}
    assert verdicts == {True, False}


class Limits:
    timeout_s, memory_mb, max_output = 2.0, 512, 100_000


def _strip_positions(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=False)


@pytest.mark.parametrize("sep", ["\n", "\n\n", "\n\n\n"])
def test_the_static_tree_is_the_parse_of_the_program(sep):
    """Verbatim library sources, then reformatted ones and the entry point: the static path's tree
    (shared nodes for the verbatim part, a parse of the rest) equals ``ast.parse`` of the text."""
    ids = [op.id for op in ops.OPERATORS]
    for k in range(len(ids)):
        a, b, c = ids[k], ids[(k + 7) % len(ids)], ids[(k + 13) % len(ids)]
        reformatted = ops.get(c).source.replace("):\n", "):  # recalled\n", 1)  # another text, the same tree
        call = ", ".join(["x"] + ["'ab'" if p.kind != "int" else "2" for p in ops.get(a).params])
        code = sep.join([ops.get(a).source, ops.get(b).source, reformatted,
                         f"def main_solution(x):\n    \"\"\"doc\"\"\"\n    return {a}({call})\n"])
        done = S.evaluate([Unit(code, (("main_solution", ("abc",)),))], Limits())
        assert done is not None, code
        (tree,) = done.trees
        assert _strip_positions(tree) == _strip_positions(ast.parse(code))
        assert len(done.verbatim) == 2


def test_verbatim_definitions_are_not_changed_by_grading():
    before = {name: [_strip_positions(fn) for _, _, fn in S._verbatim(name)] for name in ("func_0", "func_15")}
    code = ops.get("func_0").source + "\n" + ops.get("func_15").source + "\ndef main_solution(x):\n" \
        "    return func_15(func_0(x))\n"
    from opgen.score.judge import grade_in_process as grade  # the shared parses are this process's

    with_docs = code.replace("def main_solution(x):\n", "def main_solution(x):\n    'doc'\n")
    for text in (code, with_docs):
        gt = {"tasks": [{"entry": "main_solution", "expr": "func_15(func_0(x))", "input": "ab",
                         "output": "", "ops": ["func_0", "func_15"], "depth": 2}]}
        grade(gt, f"```python\n{text}```", sandbox=Limits())  # type: ignore[arg-type]
    after = {name: [_strip_positions(fn) for _, _, fn in S._verbatim(name)] for name in ("func_0", "func_15")}
    assert before == after


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
