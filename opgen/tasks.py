"""The small immutable types that flow from generators to renderers.

A :class:`Task` is one program with one input and its output; an :class:`Item` is what a row is
built from: one task, or several independent tasks packed together (co-occurrence groups), with an
optional teacher-forced assistant prefix (probe 1b).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opgen import expr
from opgen.ops import STUDY, OperatorLibrary


@dataclass(frozen=True)
class Task:
    program: expr.Expr
    input: str
    output: str
    # Measures and labels a generator attaches (probe target, condition, ...): sorted (key, value)
    # pairs, so that equal tasks compare and hash equal.
    meta: tuple[tuple[str, object], ...] = ()

    # A build makes one Task and one Item per row: the frozen dataclass's generated __init__ sets
    # each field through object.__setattr__ (~1.3 us here); storing into __dict__ is the same
    # object at under half the cost (tests/test_tasks.py compares them field by field).
    def __init__(self, program: expr.Expr, input: str, output: str,
                 meta: tuple[tuple[str, object], ...] = ()):
        d = self.__dict__
        d["program"] = program
        d["input"] = input
        d["output"] = output
        d["meta"] = meta

    @property
    def expr_text(self) -> str:
        return expr.render(self.program)

    @property
    def depth(self) -> int:
        return expr.depth(self.program)

    @property
    def ops(self) -> tuple[str, ...]:
        return expr.ops_used(self.program)

    def get(self, key: str, default: object = None) -> object:
        for k, v in self.meta:
            if k == key:
                return v
        return default

    def identity(self) -> str:
        """What makes two tasks the same task: program and input (the output follows)."""
        return f"{self.expr_text}\x00{self.input}"


def with_unchanged(task: Task, unchanged: int) -> Task:
    """``task``, noting ``measure.unchanged_calls(task.program, task.input)`` as counted by the
    generator that drew it (on the way up its tree, or arithmetically for a call on ``x``), so the
    builder need not walk the tree again. Not a field: equal tasks stay equal and hash equal
    (tests/test_generate_trees.py checks the count against the reference row by row)."""
    task.__dict__["_unchanged"] = unchanged
    return task


@dataclass(frozen=True)
class Item:
    tasks: tuple[Task, ...]
    condition: str = ""
    assistant_prefix: str = ""
    meta: tuple[tuple[str, object], ...] = field(default=())

    def __init__(self, tasks: tuple[Task, ...], condition: str = "", assistant_prefix: str = "",
                 meta: tuple[tuple[str, object], ...] = ()):
        d = self.__dict__  # as Task.__init__: the same fields, without a __setattr__ per field
        d["tasks"] = tasks
        d["condition"] = condition
        d["assistant_prefix"] = assistant_prefix
        d["meta"] = meta

    @property
    def is_group(self) -> bool:
        return len(self.tasks) > 1

    def entries(self) -> tuple[str, ...]:
        """Entry-point names: ``main_solution`` alone, ``main_solution_1..n`` in a group."""
        if len(self.tasks) == 1:
            return ("main_solution",)
        return tuple(f"main_solution_{i}" for i in range(1, len(self.tasks) + 1))

    def recall_order(self) -> tuple[str, ...]:
        """Distinct operators in order of first appearance over the tasks (tasks in order)."""
        return tuple(dict.fromkeys(op_id for t in self.tasks for op_id in t.ops))

    def ops_sorted(self, lib: OperatorLibrary = STUDY) -> tuple[str, ...]:
        """Distinct operators over the tasks, in the order of their library (``lib``, default the study's)."""
        used = set(self.recall_order())
        return tuple(op_id for op_id in lib.ids if op_id in used)
