"""Task and Item: the immutable values generators hand to renderers."""

from __future__ import annotations

import dataclasses

import pytest

from opgen import expr as E
from opgen import ops
from opgen.tasks import Item, Task


def _task(source: str, x: str, meta=()) -> Task:
    program = E.parse(source)
    return Task(program, x, E.evaluate(program, x), tuple(sorted(meta)))


def test_task_exposes_the_program_measures():
    t = _task("func_5(func_3(func_1(x, 2)), 'ab')", "cab")
    assert t.output == "abaabbcc"
    assert t.expr_text == "func_5(func_3(func_1(x, 2)), 'ab')"
    assert t.depth == 3
    assert t.ops == ("func_5", "func_3", "func_1")


def test_task_meta_lookup():
    t = _task("func_3(x)", "b", meta=[("target_op", "func_3"), ("condition", "near")])
    assert t.get("condition") == "near" and t.get("target_op") == "func_3"
    assert t.get("missing") is None and t.get("missing", 7) == 7


def test_tasks_are_frozen_and_compare_by_value():
    a, b = _task("func_3(x)", "cba"), _task("func_3(x)", "cba")
    assert a == b and hash(a) == hash(b)
    assert {a, b} == {a}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.input = "other"  # type: ignore[misc]


def test_identity_is_program_and_input():
    a = _task("func_3(x)", "cba")
    assert a.identity() == _task("func_3(x)", "cba", meta=[("k", 1)]).identity()
    assert a.identity() != _task("func_3(x)", "abc").identity()
    assert a.identity() != _task("func_17(x)", "cba").identity()
    # The separator cannot be forged: the rendered program escapes a NUL inside a literal.
    assert Task(E.Lit("a"), "b", "a").identity() != Task(E.Lit("a\x00"), "", "a").identity()


def test_single_item_entries_and_orders():
    item = Item((_task("func_9(func_3(x))", "ba"),))
    assert not item.is_group
    assert item.entries() == ("main_solution",)
    assert item.recall_order() == ("func_9", "func_3")
    assert item.ops_sorted() == ("func_3", "func_9")
    assert item.condition == "" and item.assistant_prefix == "" and item.meta == ()


def test_group_item_entries_recall_order_and_library_order():
    tasks = (_task("func_17(func_3(x))", "ab"), _task("func_2(x)", "ae"), _task("func_3(func_24(x, 2))", "ab"))
    item = Item(tasks, condition="grouped")
    assert item.is_group
    assert item.entries() == ("main_solution_1", "main_solution_2", "main_solution_3")
    # First appearance over the tasks in order, pre-order within each task.
    assert item.recall_order() == ("func_17", "func_3", "func_2", "func_24")
    assert item.ops_sorted() == ("func_2", "func_3", "func_17", "func_24")
    assert list(item.ops_sorted()) == [o for o in ops.ALL_IDS if o in item.recall_order()]


def test_items_are_hashable_values():
    t = _task("func_3(x)", "ba")
    assert Item((t,), assistant_prefix="Recall func_3:") == Item((t,), assistant_prefix="Recall func_3:")
    assert Item((t,)) != Item((t,), condition="c")
    assert len({Item((t,)), Item((t,))}) == 1


def test_fast_constructors_build_what_the_dataclass_would():
    # Task and Item write their fields straight into __dict__ (a build makes one of each per row):
    # positional and keyword calls, defaults, replace() and field order must be the dataclass's.
    prog = E.parse("func_3(x)")
    cases = [(Task, (prog, "ab", "ba"), {}), (Task, (prog, "ab"), {"output": "ba", "meta": (("k", 1),)}),
             (Item, ((_task("func_3(x)", "ab"),),), {}),
             (Item, ((),), {"condition": "near", "assistant_prefix": "Recall", "meta": (("m", 2),)})]
    for cls, args, kwargs in cases:
        made = cls(*args, **kwargs)
        generated = object.__new__(cls)
        for f, value in zip(dataclasses.fields(cls), [*args, *[kwargs.get(f.name, f.default) for f in
                                                               dataclasses.fields(cls)[len(args):]]]):
            object.__setattr__(generated, f.name, value)
        assert made == generated and hash(made) == hash(generated) and repr(made) == repr(generated)
        assert list(vars(made)) == [f.name for f in dataclasses.fields(cls)]
    assert dataclasses.replace(Task(prog, "ab", "ba"), input="cd") == Task(prog, "cd", "ba")
    with pytest.raises(TypeError):
        Task(prog, "ab")  # output has no default
