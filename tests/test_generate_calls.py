"""Trees draw a unary call's operator and its integer/choice parameters in one word: the joint
distribution must stay the native one (group with p_parameterised, operator uniform in its group,
each parameter uniform in its range)."""

from __future__ import annotations

from collections import Counter

from opgen import expr as E
from opgen import formats as F
from opgen import generate as G
from opgen import ops
from opgen.rows import RowBuffer, RowSpec
from opgen.tasks import Item, Task


def make(options: dict) -> G.Generator:
    cls = G.get("trees")
    ctx = G.Context(digest="calls", split="s", seed=0, where="r.yaml: splits.s.options")
    return cls(cls.resolve(options, ctx.where), ctx)


def _unary_calls_on_x(gen: G.Generator) -> list[E.Call]:
    out = []
    for i in range(gen.count()):
        prog = gen.item(i).tasks[0].program
        if type(prog) is E.Call and len(prog.args) == 1:
            assert type(prog.args[0]) is E.Var  # require_x: a depth-1 unary call reads x
            out.append(prog)
    return out


def test_operator_groups_and_operators_keep_their_probabilities():
    # p_parameterised 0.8: each of the 6 parameterised train operators 0.8 / 6, each of the 6
    # parameterless ones 0.2 / 6 (a separate draw per group, as the native generator did)
    gen = make({"ops": "train", "depths": [1], "rows": 6000, "p_parameterised": 0.8, "p_binary": 0.0})
    calls = _unary_calls_on_x(gen)
    n = len(calls)
    assert n == 6000
    seen = Counter(c.op for c in calls)
    members = [ops.get(o) for o in ops.resolve_set("train") if ops.get(o).n_inputs == 1]
    for op in members:
        p = (0.8 if op.params else 0.2) / 6
        assert abs(seen[op.id] / n - p) < 4 * (p * (1 - p) / n) ** 0.5 + 0.002, (op.id, seen[op.id], p * n)


def test_integer_and_choice_parameters_are_uniform_and_letters_stay_in_range():
    gen = make({"ops": ["func_1", "func_13", "func_5", "func_3"], "depths": [1], "rows": 3000, "p_binary": 0.0})
    calls = _unary_calls_on_x(gen)
    by_op: dict[str, Counter] = {}
    for c in calls:
        by_op.setdefault(c.op, Counter())[c.params] += 1
    assert set(by_op["func_1"]) == {(2,), (3,), (4,)}
    assert set(by_op["func_13"]) == {("-",), ("_",), ("|",)}
    for op_id in ("func_1", "func_13"):
        counts = by_op[op_id].values()
        assert max(counts) < 1.25 * min(counts)  # ~250 each
    assert all(len(p[0]) in (2, 3, 4) and p[0].isalpha() for p in by_op["func_5"])
    assert len(by_op["func_5"]) > 300  # letters are drawn per call, not from a table
    assert by_op["func_3"] == Counter({(): sum(by_op["func_3"].values())})


def test_repeated_programs_render_like_the_generic_renderer():
    # one-call rows reuse cached texts per (operator, parameters); a repeated program with another
    # input, a non-ASCII input and a repeated row must still equal the generic renderer's rows
    prog = E.Call("func_1", (E.Var(),), (3,))
    items = [Item((Task(prog, x, ops.get("func_1").fn(x, 3)),)) for x in ("ab", "é\"q", "ab", "x\n")]
    items.append(Item((Task(E.Call("func_1", (E.Var(),), (3,)), "zz", "zzzzzz"),)))
    nested = E.Call("func_3", (E.Call("func_1", (E.Var(),), (2,)),), ())  # known by its text
    items += [Item((Task(nested, x, E.evaluate(nested, x)),)) for x in ("ba", "ü", "ba")]
    for pf, af in (("forward", "json_output"), ("shown", "ra"), ("closed_book", "prose_code")):
        for kind in ("rl", "sft"):
            fast, slow = RowBuffer(RowSpec("s", "f", kind, pf, af, "r", "none")), \
                RowBuffer(RowSpec("s", "f", kind, pf, af, "r", "none"))
            for i, item in enumerate(items):
                assert fast.add(i, item) == slow._add_general(i, item)
                assert _texts_joined(fast.rows[-1]) == slow.rows[-1]
            assert fast.table().equals(slow.table())


def test_the_call_on_x_shortcut_draws_what_the_generic_walk_draws(monkeypatch):
    from opgen.generate import trees

    options = {"ops": "all", "depths": [1, 2], "rows": 600, "max_output_chars": 12}  # cap: some rejections
    fast = make(options)
    fast_items = [fast.item(i) for i in range(600)]
    monkeypatch.setattr(trees, "_CALL_ON_X", ())  # no shape equals it: every candidate walks
    slow = make(options)
    assert [slow.item(i) for i in range(600)] == fast_items
    assert slow.rejections == fast.rejections and fast.rejections["output_too_long"] > 0


def _texts_joined(row: tuple) -> tuple:
    """A buffered row with its prompt, ground truth and answer as whole strings (the fast path
    keeps long texts as pieces until a column is written)."""
    return tuple(F.text(v) if k < 3 and v is not None else v for k, v in enumerate(row))
