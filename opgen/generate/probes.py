"""Probe families 1b / 1d / 1f / 1g: controlled variations of where a target operator sits.

Each probe holds a target operator (default: func_24 first, then the other held-out operators)
in one controlled context and varies one thing, 256 rows per condition:

- ``1b`` definition load: the target is recalled after ``r`` other operators' recall blocks, given
  as a teacher-forced assistant prefix (the item holds r independent atomic tasks, then the
  target's); conditions span ``r`` and which operators the others are drawn from;
- ``1d`` chain position: the target at the outer, middle or inner position of a deep chain of
  other operators (and alone, as the baseline);
- ``1f`` builtin-method tails: ``m`` builtin method calls between the target's name and its own
  argument, ``func_24((((x).upper()).strip()).lower(), 2)``;
- ``1g`` long literal: a literal of L characters as the target's first argument.

Every item records in ``meta`` what an analyst needs, measured on the expression tree
(``expr.tail_distances``): characters, other calls' argument tails and method tails between the
target's name and its own trailing argument, the target's call position, r, the literal length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opgen import expr, formats, ops
from opgen.generate import OP_ID, OP_SET, Context, Generator, cells, register_generator
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import Rng
from opgen.tasks import Item

PER_CONDITION = 256
PARAM_HELDOUT = tuple(dict.fromkeys(o for o in ("func_24",) + ops.HELDOUT_IDS if ops.get(o).params))
DEFAULT_TARGETS = {
    # Definition load and chain position concern any operator's definition.
    "1b": ("func_24",) + tuple(o for o in ops.HELDOUT_IDS if o != "func_24"),
    # A chain nests one string: binary operators (func_7) cannot stand in it.
    "1d": ("func_24",) + tuple(o for o in ops.HELDOUT_IDS if o != "func_24" and ops.get(o).n_inputs == 1),
    # "Between the name and its own argument" needs an own trailing argument: parameterised ops.
    "1f": PARAM_HELDOUT,
    "1g": PARAM_HELDOUT,
}


def recall_prefix(op_ids: Sequence[str], lib: OperatorLibrary = STUDY) -> str:
    """The RA recall blocks of ``op_ids`` (operators of ``lib``) exactly as the renderer writes them,
    each followed by the blank line that precedes the next block: the gold answer continues with the
    target's block."""
    block = formats.answer_spec("ra").recall_block
    assert block is not None
    return "".join(block(o, lib) + "\n" for o in op_ids)


def measures(program: expr.Expr, target: str) -> dict[str, object]:
    """Tail measures of the target's first call in ``program`` (-1 where it has no trailing argument)."""
    calls = [n for n in expr.walk(program) if isinstance(n, expr.Call)]
    position = next(i for i, n in enumerate(calls) if n.op == target)
    tail = next((t for t in expr.tail_distances(program) if t.position == position), None)
    return {
        "target_op": target,
        "call_position": position,
        "tail_chars": tail.chars if tail else -1,
        "tail_calls": tail.call_tails if tail else -1,
        "method_tails": tail.method_tails if tail else -1,
        "calls_between": tail.calls_between if tail else -1,
    }


def _meta(d: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))


@dataclass(frozen=True)
class Condition:
    name: str
    value: Any  # the varied quantity: (r, others), (depth, position), m, L


_TARGETS = {"type": "array", "items": OP_ID, "minItems": 1}
_INTS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}


class Probe(Generator):
    """Conditions x rows per condition: row i has condition i // per_condition, and the targets
    cycle within a condition (func_24 first, so it gets the spare rows)."""

    family = ""
    COMMON = {"per_condition": PER_CONDITION}
    SIDED = True  # every probe's inputs are drawn on the eval side (opgen.rng.input_side)
    # Any library's operators, given its own ``targets``: the default targets are the study's
    # (func_24 first), so a recipe on another library names them (docs/operators.md).
    ANY_LIBRARY = True

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        super().__init__(options, ctx)
        self.per = self.options["per_condition"]
        self.lib = ctx.library
        if not self.lib.is_study and list(self.options["targets"]) == list(self.DEFAULTS["targets"]):
            own = [o for o in self.lib.heldout_ids if self.lib.get(o).n_inputs == 1] or list(self.lib.heldout_ids)
            raise self.fail("targets", f"the default targets of {self.NAME} are the study's operators "
                            f"({', '.join(self.DEFAULTS['targets'][:3])}, ...: func_24 first); library "
                            f"{self.lib.name!r} is not the study's, so the recipe names its own targets "
                            f"(e.g. targets: [{', '.join(own[:3])}])")
        known = self.op_set(self.options["targets"], "targets")
        self.targets = tuple(t for t in dict.fromkeys(self.options["targets"]) if t in known)
        self.conditions = tuple(self.make_conditions())
        if not self.conditions:
            raise self.fail("", "no condition to build")

    def make_conditions(self) -> list[Condition]:  # pragma: no cover - abstract
        raise NotImplementedError

    def count(self) -> int:
        return len(self.conditions) * self.per

    def candidate(self, i: int, j: int) -> Item | None:
        if not 0 <= i < self.count():
            raise IndexError(i)
        cond = self.conditions[i // self.per]
        k = i % self.per
        return self.build(cond, self.targets[k % len(self.targets)], self.rng(i, j))

    def build(self, cond: Condition, target: str, rng: Rng) -> Item | None:  # pragma: no cover - abstract
        raise NotImplementedError


class DefinitionLoad(Probe):
    """1b: r other atomic tasks, then the target's; the others' recall blocks are the prefix."""

    NAME = family = "probe_1b"
    VERSION = 2  # 2: inputs on the role's side
    OTHERS = ("train", "heldout", "all")
    DEFAULTS = {**Probe.COMMON, "targets": list(DEFAULT_TARGETS["1b"]),
                "r": [0, 1, 2, 3, 4, 5, 6, 8, 10], "others": list(OTHERS)}
    OPTIONS_SCHEMA = {"properties": {
        "per_condition": {"type": "integer", "minimum": 1}, "targets": _TARGETS, "r": _INTS,
        "others": {"type": "array", "items": {"enum": list(OTHERS)}, "minItems": 1},
    }}

    def make_conditions(self) -> list[Condition]:
        conds = [Condition(f"r{r}-{src}", (r, src)) for r in self.options["r"] for src in self.options["others"]]
        for r, src in (c.value for c in conds):
            for t in self.targets:
                n = len([o for o in self.lib.resolve_set(src) if o != t])
                if r > n:
                    raise self.fail("r", f"r={r} others from {src!r} for target {t}: only {n} available")
        return conds

    def build(self, cond: Condition, target: str, rng: Rng) -> Item:
        r, src = cond.value
        others = rng.sample([o for o in self.lib.resolve_set(src) if o != target], r)
        tasks = [cells.atomic_task(o, rng.derive("other", k), side=self.side, lib=self.lib) for k,
                 o in enumerate(others)]
        tasks.append(cells.atomic_task(target, rng.derive("target"), side=self.side, lib=self.lib))
        meta = measures(tasks[-1].program, target)
        meta.update(family="probe_1b", r=r, others_from=src, others=",".join(others), position=r)
        return Item(tuple(tasks), condition=cond.name, assistant_prefix=recall_prefix(others, self.lib),
                    meta=_meta(meta))


class ChainPosition(Probe):
    """1d: the target at the outer / middle / inner position of a deep chain of other operators."""

    NAME = family = "probe_1d"
    VERSION = 2  # 2: inputs on the role's side
    POSITIONS = ("outer", "middle", "inner")
    DEFAULTS = {**Probe.COMMON, "targets": list(DEFAULT_TARGETS["1d"]), "depths": [8, 16],
                "positions": list(POSITIONS), "baseline": True, "chain_ops": "train"}
    OPTIONS_SCHEMA = {"properties": {
        "per_condition": {"type": "integer", "minimum": 1}, "targets": _TARGETS,
        "depths": {"type": "array", "items": {"type": "integer", "minimum": 3}, "minItems": 1},
        "positions": {"type": "array", "items": {"enum": list(POSITIONS)}, "minItems": 1},
        "baseline": {"type": "boolean"}, "chain_ops": OP_SET,
    }}

    def make_conditions(self) -> list[Condition]:
        self.chain_ops = cells.unary(self.op_set(self.options["chain_ops"], "chain_ops"), self.lib)
        for t in self.targets:
            if self.lib.get(t).n_inputs != 1:
                raise self.fail("targets", f"{t} takes two strings and cannot stand in a chain")
            if len([o for o in self.chain_ops if o != t]) < 2:
                raise self.fail("chain_ops", "chains need at least two unary operators besides the target")
        conds = [Condition("d1-alone", (1, "outer"))] if self.options["baseline"] else []
        return conds + [Condition(f"d{d}-{p}", (d, p)) for d in self.options["depths"]
                        for p in self.options["positions"]]

    def build(self, cond: Condition, target: str, rng: Rng) -> Item | None:
        d, where = cond.value
        level = {"outer": 0, "middle": d // 2, "inner": d - 1}[where]
        task = cells.grow_chain([o for o in self.chain_ops if o != target], d, rng, fixed={level: target},
                                side=self.side,
                                lib=self.lib)
        if task is None:
            self.rejections["chain_stuck"] += 1
            return None
        meta = measures(task.program, target)
        meta.update(family="probe_1d", chain_depth=d, position=where, level=level)
        return Item((task,), condition=cond.name, meta=_meta(meta))


class MethodTails(Probe):
    """1f: m builtin method calls wrapped around x inside the target's first argument."""

    NAME = family = "probe_1f"
    # 2: m spans the study's distance buckets (func_24: m <= 2 under 40 characters, 4-8 in 40-150,
    # 16 over 150; m up to 7 stopped at 93) and the methods are the training data's own
    # (strip, lstrip, rstrip, title and casefold occur in no training file); 3: inputs on the role's side
    VERSION = 3
    DEFAULTS = {**Probe.COMMON, "targets": list(DEFAULT_TARGETS["1f"]), "m": [0, 1, 2, 4, 6, 8, 12, 16],
                "methods": list(ops.NATIVE_METHODS)}
    OPTIONS_SCHEMA = {"properties": {
        "per_condition": {"type": "integer", "minimum": 1}, "targets": _TARGETS, "m": _INTS,
        "methods": {"type": "array", "items": {"enum": list(ops.METHODS)}, "minItems": 1},
    }}

    def make_conditions(self) -> list[Condition]:
        return [Condition(f"m{m}", m) for m in self.options["m"]]

    def build(self, cond: Condition, target: str, rng: Rng) -> Item:
        node: expr.Expr = expr.Var()
        last = ""
        methods = self.options["methods"]
        for _ in range(cond.value):
            name = rng.choice([m for m in methods if m != last] or methods)
            node, last = expr.Method(node, name), name
        task = cells.atomic_task(target, rng, first=node, side=self.side, lib=self.lib)
        meta = measures(task.program, target)
        meta.update(family="probe_1f", m=cond.value)
        return Item((task,), condition=cond.name, meta=_meta(meta))


class LongLiteral(Probe):
    """1g: a literal of L lowercase letters as the target's first argument."""

    NAME = family = "probe_1g"
    VERSION = 2  # 2: inputs on the role's side
    DEFAULTS = {**Probe.COMMON, "targets": list(DEFAULT_TARGETS["1g"]), "lengths": [8, 25, 50, 100, 200]}
    OPTIONS_SCHEMA = {"properties": {
        "per_condition": {"type": "integer", "minimum": 1}, "targets": _TARGETS,
        "lengths": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": cells.MAX_OUTPUT // 2},
                    "minItems": 1},
    }}

    def make_conditions(self) -> list[Condition]:
        return [Condition(f"lit{n}", n) for n in self.options["lengths"]]

    def build(self, cond: Condition, target: str, rng: Rng) -> Item:
        task = cells.atomic_task(target, rng, first=expr.Lit(rng.text(cond.value, cond.value)), side=self.side,
                                 lib=self.lib)
        meta = measures(task.program, target)
        meta.update(family="probe_1g", literal_len=cond.value)
        return Item((task,), condition=cond.name, meta=_meta(meta))


for _cls in (DefinitionLoad, ChainPosition, MethodTails, LongLiteral):
    register_generator(_cls)
