"""Programs for the static path's differential test and benchmark: built rows' answers and variants.

``corpus(rows, n, seed)`` yields ``(kind, ground_truth, response)``; every kind is a way a model
answers (canonical, reformatted, chimeras, arity errors, renamed variables, mutated bodies,
missing definitions, helpers, top-level code, resource limits, syntax errors ...). The kinds the
static path can prove and those it must leave to the sandbox are both in it: the test requires the
two paths to give the same grade dict whichever path is taken.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from opgen import ops


def built_rows(out: Path, limit: int | None = None) -> list[dict]:
    """Ground truths of the bundled eval suite, built into ``out`` (``opgen build``'s library call)."""
    import pyarrow.parquet as pq

    from opgen import build, recipe

    if not (out / "manifest.json").exists():
        build.build([recipe.load("eval-suite")], out, limit=limit)
    rows = []
    for path in sorted(out.glob("*.parquet")):
        for rm in pq.read_table(path, columns=["reward_model"]).column("reward_model").to_pylist():
            rows.append(json.loads(rm["ground_truth"]))
    return rows


def _recall_order(tasks: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for t in tasks:
        for op in t["ops"]:
            seen.setdefault(op, None)
    return list(seen)


def _respond(recalls: list[tuple[str, str | None]], assemble: str, think: str = "") -> str:
    blocks = [f"Recall {op}: {ops.get(op).gloss if op in ops.BY_ID else 'x'}\n"
              + (f"```python\n{code}```\n" if code is not None else "") for op, code in recalls]
    return think + "\n".join(blocks) + "\nAssemble:\n```python\n" + assemble + "\n```"


def _renamed(source: str, name: str) -> str:
    head = source.split("(", 1)
    return f"def {name}(" + head[1]


def _unparsed(source: str) -> str:
    return ast.unparse(ast.parse(source)) + "\n"


class _Mutate(ast.NodeTransformer):
    def __init__(self, rng: random.Random, kind: str):
        self.rng, self.kind, self.done = rng, kind, False

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if self.kind == "const" and not self.done and self.rng.random() < 0.5:
            if type(node.value) is int:
                self.done = True
                return ast.Constant(node.value + self.rng.choice((-1, 1, 2)))
            if type(node.value) is str and len(node.value) < 20:
                self.done = True
                return ast.Constant(node.value + "z" if node.value else "q")
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if self.kind == "op" and not self.done and self.rng.random() < 0.6:
            self.done = True
            swaps = {ast.Add: ast.Mult, ast.Mult: ast.Add, ast.Sub: ast.Add, ast.Mod: ast.FloorDiv}
            node.op = swaps.get(type(node.op), ast.Sub)()
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if self.kind == "op" and not self.done and self.rng.random() < 0.6:
            self.done = True
            swaps = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.In: ast.NotIn,
                     ast.NotIn: ast.In, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
            node.ops = [swaps.get(type(node.ops[0]), ast.Eq)()] + node.ops[1:]
        return node


def _mutated(source: str, rng: random.Random, kind: str) -> str:
    tree = ast.parse(source)
    for _ in range(4):
        m = _Mutate(rng, kind)
        new = m.visit(ast.parse(source))
        if m.done:
            tree = new
            break
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _rename_var(source: str, rng: random.Random) -> str:
    tree = ast.parse(source)
    fn = tree.body[0]
    names = [a.arg for a in fn.args.args] + sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                                                    and isinstance(n.ctx, ast.Store)})
    old = rng.choice(names)
    new = old + "_v"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
        elif isinstance(node, ast.arg) and node.arg == old:
            node.arg = new
    return ast.unparse(tree) + "\n"


def _arity_changed(source: str, rng: random.Random) -> str:
    tree = ast.parse(source)
    fn = tree.body[0]
    if len(fn.args.args) > 1 and rng.random() < 0.6:
        fn.args.args.pop()
    else:
        fn.args.args.append(ast.arg("extra"))
    return ast.unparse(tree) + "\n"


def _reformatted_main(entry: str, expr: str, rng: random.Random) -> str:
    choice = rng.randrange(6)
    if choice == 0:
        return f'def {entry}(x):\n    """Compose the library calls."""\n    return {expr}'
    if choice == 1:
        return f"def {entry}(s):\n    return {expr.replace('x', 's') if _only_x(expr) else expr}"
    if choice == 2:
        return f"def {entry}( x ):\n    # the program\n\n    return ({expr})\n"
    if choice == 3:
        return f"def {entry}(x):\n    return {expr.replace(', ', ' , ').replace('(', '( ')}"
    if choice == 4:
        return f"def {entry}(x):\n    'doc'\n    ...\n    return {expr}\n\n\n# end\n"
    return f"def {entry}(x):\n\treturn {expr}"


def _only_x(expr: str) -> bool:
    # 'x' only as the variable: no literal holds an x (then replacing it is a rename)
    tree = ast.parse(expr, mode="eval")
    return not any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "x" in n.value for n in ast.walk(tree))


def _expr_variant(expr: str, rng: random.Random) -> str:
    """A different expression of (mostly) the grammar: another parameter, method, literal, arity..."""
    tree = ast.parse(expr, mode="eval")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    choice = rng.randrange(11)
    if choice == 0 and calls:  # another int parameter
        c = rng.choice(calls)
        ints = [a for a in c.args if isinstance(a, ast.Constant) and type(a.value) is int]
        if ints:
            ints[0].value += rng.choice((-5, -1, 1, 3, 40))
    elif choice == 1 and calls:  # one argument fewer or more: an arity error
        c = rng.choice(calls)
        if c.args and rng.random() < 0.5:
            c.args.pop()
        else:
            c.args.append(ast.Constant(rng.choice((2, "ab"))))
    elif choice == 2 and calls:  # an operator never defined
        rng.choice(calls).func.id = rng.choice(("func_99", "helper"))
    elif choice == 3:
        tree.body = ast.Call(ast.Attribute(tree.body, rng.choice(ops.METHODS), ast.Load()), [], [])
    elif choice == 4:
        tree.body = ast.BinOp(tree.body, ast.Add(), ast.Constant(rng.choice(("!", "ß", "é", "%d"))))
    elif choice == 5 and calls:  # a builtin
        tree.body = ast.Call(ast.Name("str", ast.Load()), [tree.body], [])
    elif choice == 6 and calls:  # an int where a string goes
        c = rng.choice(calls)
        c.args[0] = ast.Constant(rng.choice((0, 3, -2, 70)))
    elif choice == 7 and calls:  # a string parameter, '%' formats included
        c = rng.choice(calls)
        if len(c.args) > 1:
            c.args[-1] = ast.Constant(rng.choice(("ab", "%s", "-", "%5d", "xy" * 40)))
    elif choice == 8 and calls:  # another operator of the library under the call
        rng.choice(calls).func.id = rng.choice(ops.ALL_IDS)
    elif choice == 9:
        tree.body = ast.BinOp(ast.Constant("pre"), ast.Add(), tree.body)
    else:  # keyword argument: not the grammar
        if calls and calls[0].args:
            calls[0].keywords = [ast.keyword("s", calls[0].args.pop(0))]
    return ast.unparse(tree)


_LIMITS = (
    # (main expression, what the sandbox meets)
    ("func_1(func_1(func_1(func_1(func_1(func_1(func_1(func_1(x, 4), 4), 4), 4), 4), 4), 4), 4)", "output cap"),
    ("func_13(func_1(func_1(func_1(func_1(func_1(x, 4), 4), 4), 4), 4), '-')", "output cap"),
    ("func_17(func_1(func_1(func_1(func_1(x, 4), 4), 4), 4))", "recursion"),
    ("func_17(func_1(x, 1500))", "deep recursion, within the sandbox's stack"),
    ("func_20(func_1(func_1(func_1(func_1(func_1(x, 4), 4), 4), 4), 4), func_9(func_1(x, 200)))", "recursion"),
    ("func_1(x, 1000000000)", "memory"),
    ("func_18('', 2000000000)", "timeout"),
    ("func_19(x, 100000000)", "timeout"),
    ("func_1(x, 10 ** 30)", "overflow"),
    ("func_24(func_1(x, 300), 5)", "fine"),
    ("func_23(func_1(x, 100), 100000)", "fine"),
)

KINDS = ("canonical", "reformatted", "doc", "chimera", "chimera_recall", "arity_def", "arity_call", "renamed",
         "mutated_const", "mutated_op", "expr_variant", "missing_def", "helper", "toplevel", "limits",
         "syntax", "plain_block", "recursion_rebind", "duplicate_entry", "group", "no_answer", "think")
# Sampling weights: limits (timeouts cost the sandbox its wall clock) stay rare.
_WEIGHTS = {"limits": 0.15, "group": 0.5, "no_answer": 0.2, "think": 0.5}


def corpus(rows: list[dict], n: int, seed: int = 0) -> Iterator[tuple[str, dict, str]]:
    rng = random.Random(seed)
    weights = [_WEIGHTS.get(k, 1.0) for k in KINDS]
    for _ in range(n):
        kind = rng.choices(KINDS, weights)[0]
        gt = rows[rng.randrange(len(rows))]
        if kind == "group":
            other = rows[rng.randrange(len(rows))]
            tasks = [dict(t, entry=f"main_solution_{j}") for j, t in enumerate(gt["tasks"] + other["tasks"], 1)]
            gt = {"mode": "program", "tasks": tasks}
        yield kind, gt, answer(kind, gt, random.Random(rng.getrandbits(64)))


@dataclass
class _Draft:
    """An answer being built: the definitions it assembles, the ones it recalls, its entry points."""

    tasks: list[dict]
    order: list[str]
    src: dict[str, str]
    recall_src: dict[str, str]
    mains: dict[str, str]
    victim: str
    think: str = ""


def _reformatted(a: _Draft, rng: random.Random) -> None:
    for op in a.order:
        if rng.random() < 0.5:
            a.src[op] = _unparsed(a.src[op])
    for t in a.tasks:
        a.mains[t["entry"]] = _reformatted_main(t["entry"], t["expr"], rng)


def _doc(a: _Draft, rng: random.Random) -> None:
    v = a.victim
    a.src[v] = a.src[v].replace(a.src[v].split("\n")[1] + "\n", "", 1) if rng.random() < 0.5 \
        else a.src[v].replace('"""', '"""Recalled: ', 1)
    a.recall_src[v] = a.src[v]


def _chimera(recall: bool):
    def mutate(a: _Draft, rng: random.Random) -> None:
        op = ops.get(a.victim)
        same = [o.id for o in ops.OPERATORS if o.arity == op.arity and o.id != a.victim]
        other = rng.choice(same if same and rng.random() < 0.8 else list(ops.ALL_IDS))
        a.src[a.victim] = _renamed(ops.get(other).source, a.victim)
        if recall or rng.random() < 0.7:
            a.recall_src[a.victim] = a.src[a.victim]
    return mutate


def _arity_def(a: _Draft, rng: random.Random) -> None:
    a.src[a.victim] = _arity_changed(a.src[a.victim], rng)
    a.recall_src[a.victim] = a.src[a.victim]


def _arity_call(a: _Draft, rng: random.Random) -> None:
    t = rng.choice(a.tasks)
    tree = ast.parse(t["expr"], mode="eval")
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call)]
    c = rng.choice(calls)
    if c.args and (len(c.args) > 1 or rng.random() < 0.3):
        c.args.pop()
    else:
        c.args.append(ast.Constant(rng.choice((1, "ab", 2))))
    a.mains[t["entry"]] = f"def {t['entry']}(x):\n    return {ast.unparse(tree)}"


def _renamed_var(a: _Draft, rng: random.Random) -> None:
    a.src[a.victim] = _rename_var(a.src[a.victim], rng)
    if rng.random() < 0.5:
        a.recall_src[a.victim] = a.src[a.victim]


def _mutated_by(how: str):
    def mutate(a: _Draft, rng: random.Random) -> None:
        a.src[a.victim] = _mutated(a.src[a.victim], rng, how)
        if rng.random() < 0.6:
            a.recall_src[a.victim] = a.src[a.victim]
    return mutate


def _expr_variant_main(a: _Draft, rng: random.Random) -> None:
    t = rng.choice(a.tasks)
    a.mains[t["entry"]] = f"def {t['entry']}(x):\n    return {_expr_variant(t['expr'], rng)}"


def _missing_def(a: _Draft, rng: random.Random) -> None:
    del a.src[a.victim]
    if rng.random() < 0.5:
        del a.recall_src[a.victim]


def _helper(a: _Draft, rng: random.Random) -> None:
    v = a.victim
    params = ops.get(v).signature
    impl = _renamed(a.src[v], f"{v}_impl")
    a.src[v] = (f"def _h{params}:\n    return {v}_impl{params}\n\n" + impl
                + f"\ndef {v}{params}:\n    return _h{params}\n")


def _toplevel(a: _Draft, rng: random.Random) -> None:
    line = rng.choice(("import math\n", "x = 5\n", "print('hi')\n", "from math import gcd\n",
                       "main_solution = None\n", "if True:\n    pass\n"))
    where = rng.choice(a.order)
    a.src[where] = line + a.src[where] if rng.random() < 0.5 else a.src[where] + line


def _limits(a: _Draft, rng: random.Random) -> None:
    expr, _ = rng.choice(_LIMITS)
    need = {n.id for n in ast.walk(ast.parse(expr)) if isinstance(n, ast.Name) and n.id in ops.BY_ID}
    for op in sorted(need - set(a.src)):
        a.src[op] = a.recall_src[op] = ops.get(op).source
    t = a.tasks[0]
    a.mains[t["entry"]] = f"def {t['entry']}(x):\n    return {expr}"


def _syntax(a: _Draft, rng: random.Random) -> None:
    a.src[a.victim] = a.src[a.victim].replace("):", ")", 1)


def _recursion_rebind(a: _Draft, rng: random.Random) -> None:
    rec = rng.choice(("func_17", "func_20", "func_24"))
    a.src[a.victim] = _renamed(ops.get(rec).source, a.victim)
    a.recall_src[a.victim] = a.src[a.victim]
    if rng.random() < 0.6:
        others = [o.id for o in ops.OPERATORS if o.arity == ops.get(rec).arity]
        a.src[rec] = _renamed(ops.get(rng.choice(others)).source, rec)


def _duplicate_entry(a: _Draft, rng: random.Random) -> None:
    t = rng.choice(a.tasks)
    first = f"def {t['entry']}(x):\n    return x\n\n"
    e = t["entry"]
    a.mains[e] = first + a.mains[e] if rng.random() < 0.5 else a.mains[e] + "\n\n" + first


def _think(a: _Draft, rng: random.Random) -> None:
    a.think = "<think>Recall func_3: no\n```python\ndef main_solution(x):\n    return x\n```\n</think>\n"


# how each kind changes the canonical answer (kinds not named here keep it)
_MUTATIONS = {
    "reformatted": _reformatted, "doc": _doc, "chimera": _chimera(False), "chimera_recall": _chimera(True),
    "arity_def": _arity_def, "arity_call": _arity_call, "renamed": _renamed_var,
    "mutated_const": _mutated_by("const"), "mutated_op": _mutated_by("op"), "expr_variant": _expr_variant_main,
    "missing_def": _missing_def, "helper": _helper, "toplevel": _toplevel, "limits": _limits,
    "syntax": _syntax, "recursion_rebind": _recursion_rebind, "duplicate_entry": _duplicate_entry,
    "think": _think,
}


def answer(kind: str, gt: dict, rng: random.Random) -> str:
    tasks = gt["tasks"]
    order = _recall_order(tasks)
    src = {op: ops.get(op).source for op in order}
    mains = {t["entry"]: f"def {t['entry']}(x):\n    return {t['expr']}" for t in tasks}
    a = _Draft(tasks, order, src, dict(src), mains, rng.choice(order))
    if kind in _MUTATIONS:
        _MUTATIONS[kind](a, rng)
    defs = "\n".join(a.src.values())
    assemble = (defs + "\n" if defs else "") + "\n\n".join(a.mains.values())
    if kind == "plain_block":
        return "Here is the program:\n```python\n" + assemble + "\n```\n"
    if kind == "no_answer":
        return "I cannot do this." if rng.random() < 0.5 else "```python\ndef other(x):\n    return x\n```"
    recalls: list[tuple[str, str | None]] = [(op, a.recall_src.get(op)) for op in order]
    if rng.random() < 0.1:  # a duplicated or extra block
        recalls.append((rng.choice(list(ops.ALL_IDS)), ops.get(rng.choice(list(ops.ALL_IDS))).source))
    if rng.random() < 0.05:
        recalls = recalls[1:]
    return _respond(recalls, assemble, a.think)


def differential(items: list[tuple[str, dict, str]], box: object, threads: int = 4, chunk: int = 4000,
                 progress: bool = False) -> dict:
    """Grade every item with the static path off (sandbox only) and on; count the disagreements.

    Recall verdicts are cached by text within a path (diagnose._VERDICTS), so each path keeps its
    own cache: a verdict the sandbox computed never answers for the static path, nor the reverse.
    """
    import importlib
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from opgen.score import diagnose as D
    from opgen.score import static as S
    from opgen.score.settings import GradeSettings

    G = importlib.import_module("opgen.score.judge")
    caches: dict[str, dict] = {"sandbox": {}, "static": {}}
    swap = isinstance(getattr(D, "_VERDICTS", None), dict)
    real = S.evaluate
    local = threading.local()

    def counted(units, sandbox, library):
        got = real(units, sandbox, library)
        local.hit = got is not None
        return got

    def grade(item, static: bool) -> tuple[dict, bool]:
        _, gt, response = item
        if not swap and hasattr(getattr(D, "_VERDICTS", None), "clear"):
            D._VERDICTS.clear()  # a cache of another shape: emptied before every grade instead
        local.hit = False
        return G.grade_in_process(gt, response, sandbox=box, settings=GradeSettings(static=static)), local.hit

    disagreements: list[tuple[str, dict, str, dict, dict, bool]] = []
    by_kind: dict[str, list[int]] = {}
    hits = 0
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        with ThreadPoolExecutor(threads) as pool:
            if swap:
                D._VERDICTS = caches["sandbox"]
            slow = list(pool.map(lambda it: grade(it, False)[0], part))
            if swap:
                D._VERDICTS = caches["static"]
            S.evaluate = counted
            try:
                fast = list(pool.map(lambda it: grade(it, True), part))
            finally:
                S.evaluate = real
        for it, (a, hit), b in zip(part, fast, slow):
            counts = by_kind.setdefault(it[0], [0, 0])
            counts[0] += 1
            counts[1] += hit
            hits += hit
            if a != b:  # hit: the static path answered; else the sandbox twice (its own limits' timing)
                disagreements.append((it[0], it[1], it[2], a, b, hit))
        if progress:
            static_bad = sum(d[5] for d in disagreements)
            print(f"  {start + len(part)} graded, {static_bad} disagreements where the static path answered, "
                  f"{len(disagreements) - static_bad} between two sandbox runs, {hits} answered statically", flush=True)
    if swap:
        D._VERDICTS = {}
    return {"n": len(items), "disagreements": disagreements, "static_disagreements": sum(d[5] for d in disagreements),
            "static": hits, "by_kind": by_kind}
