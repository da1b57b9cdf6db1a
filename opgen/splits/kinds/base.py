"""What a split kind is made of (docs/splits.md, "Split kinds"): the :class:`SplitKind` each kind's
file defines, the :class:`Rule` a recipe's ``split`` resolves to, and the pieces kinds share.

A kind is one frozen object: its fields (a JSON schema), how it resolves them into the rule's
resolved config, its draw rule (what a training and an eval row may hold, and how a split's
generator is held to it) and its part of the certificate (what it names as held out and what its
check reads from the written rows). opgen.splits.kinds registers one object per kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opgen import expr
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.splits import compounds
from opgen.tasks import Item


class SplitError(ValueError, OpgenError):
    """A ``split`` that cannot be used; the message starts with ``<file>: split.<field>:``."""

    exit_code = 1


# an operator id: any library's (a Python name); which ids exist is the recipe's library's to say
OP_ID: dict[str, Any] = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
OP_SET: dict[str, Any] = {"oneOf": [{"enum": ["train", "heldout", "all"]},
                                    {"type": "array", "items": OP_ID, "minItems": 1}]}
COMPOUNDS = {"type": "object", "additionalProperties": False,
             "properties": {"max_size": {"type": "integer", "minimum": 2, "maximum": compounds.MAX_SIZE_LIMIT},
                            "leaves": {"type": "boolean"}, "inputs": {"type": "boolean"},
                            "params": {"type": "boolean"}, "depths": {"type": "boolean"},
                            "atoms_per": {"enum": list(compounds.COUNTS)},
                            "compounds_per": {"enum": list(compounds.COUNTS)}}}
PAIR = {"type": "array", "items": OP_ID, "minItems": 2, "maxItems": 2}
# The generators that plan their rows from composition pools: a split reaches their pools
# through ``compositions.split`` (opgen/generate/cells.py), not through a redraw.
POOL_CELLS = ("sft_cell", "matched_stream")

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\.[a-z]+|\+")  # an operator id (any library's), a method, +


def canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def tokens(compound: str) -> set[str]:
    """The node labels a compound text names (``func_20(_,func_3)`` → func_20, func_3)."""
    return set(_TOKEN.findall(compound))


def op_set(spec: Any, where: str, lib: OperatorLibrary = STUDY) -> tuple[str, ...]:
    try:
        return lib.resolve_set(spec)
    except (ValueError, KeyError) as exc:
        raise SplitError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Rule:
    """A resolved split: its kind, its resolved config (what the manifest shows), its compounds and
    the kind's own resolved fields (``data``, a frozen record of the kind's)."""

    impl: SplitKind
    config: dict[str, Any]
    spec: compounds.CompoundSpec
    where: str
    data: Any = None
    # the recipe's operator library: the rule's operators, pairs and mcd pool are its (not config:
    # the study's resolved config, and so its digests, stay as they were)
    library: OperatorLibrary = field(default=STUDY, compare=False)

    @property
    def kind(self) -> str:
        return self.impl.name

    def admitter(self, role: str) -> Callable[[Item], bool] | None:
        """The test a candidate row of a split of ``role`` must pass (None: every row passes)."""
        return self.impl.admitter(self, role)

    def tree_holds_heldout(self, tree: expr.Expr) -> bool:
        return self.impl.tree_holds_heldout(self, tree)

    def heldout_compounds(self) -> list[str] | None:
        """Every compound text the rule holds out, when they can be listed; else None."""
        return self.impl.heldout_compounds(self)

    def prepare(self, merged: dict[str, Any], where: str) -> dict[str, Any]:
        """A recipe split (defaults merged in) adapted to this rule, before its generator checks it."""
        return self.impl.prepare(self, merged, where)

    def wrap(self, gen: Any, role: str, generator: str, where: str) -> Any:
        """``gen`` with its candidates held to this rule (a planned generator: checked, not redrawn)."""
        return self.impl.wrap(self, gen, role, generator, where)

    def resolved(self) -> dict[str, Any]:
        return self.config


@dataclass(frozen=True)
class Read:
    """What a certificate read back from a build's written rows, for a kind's check."""

    train: Sequence[compounds.RowUnits]
    evals: Sequence[compounds.RowUnits]
    train_depths: Sequence[int]
    eval_depths: Sequence[int]
    claims: Mapping[str, Any]  # what the kind's search claimed (mcd), else empty
    train_facts: Sequence[Any] = ()  # the kind's row_fact of each row (systematicity: its path pairs)
    eval_facts: Sequence[Any] = ()


@dataclass(frozen=True)
class SplitKind:
    """One kind of split (docs/splits.md): a kind's file defines one instance, ``KIND``.

    ``fields``: the JSON schema properties of the kind's own fields (``kind``, ``compounds`` and
    ``description`` are every kind's); ``required``: the fields without a default. The methods
    are the kind's steps, each called with the resolved :class:`Rule`."""

    name: str
    summary: str  # one line: what training and eval rows hold
    fields: Mapping[str, Any]
    required: tuple[str, ...] = ()
    # presented as testing known atoms in new combinations: its certificate warns when D_A is not small
    compound_only: bool = True

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": ["kind", *self.required],
                "properties": {"kind": {"type": "string"}, "compounds": COMPOUNDS,
                               "description": {"type": "string"}, **self.fields}}

    # ------------------------------------------------------------ resolve

    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: compounds.CompoundSpec, where: str,
                seed: int, lib: OperatorLibrary) -> Rule:
        """The rule of ``raw`` (checked against :meth:`schema`): ``config`` holds ``kind``, ``compounds``
        (and ``description``); the kind adds its resolved fields."""
        raise NotImplementedError

    # ------------------------------------------------------------ the draw rule

    def admitter(self, rule: Rule, role: str) -> Callable[[Item], bool] | None:
        return None

    def tree_holds_heldout(self, rule: Rule, tree: expr.Expr) -> bool:
        return False

    def prepare(self, rule: Rule, merged: dict[str, Any], where: str) -> dict[str, Any]:
        return merged

    def wrap(self, rule: Rule, gen: Any, role: str, generator: str, where: str) -> Any:
        return gen

    # ------------------------------------------------------------ the certificate

    def heldout_compounds(self, rule: Rule) -> list[str] | None:
        return None

    def row_fact(self, rule: Rule, trees: Sequence[expr.Expr]) -> Any:
        """What the kind's check reads from a written row's trees beyond its atoms, compounds and
        depth (None: nothing)."""
        return None

    def claims(self, rule: Rule, recipe: Any, sections: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """What a search behind the split claimed, for the certificate's check (none but mcd's)."""
        return {}

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        """Add the kind's facts to ``cert`` and ``check``, and a line to ``problems`` per broken promise."""
        raise NotImplementedError


class FilterKind(SplitKind):
    """A kind whose rule filters each split's candidates (systematicity, heldout-ops, productivity):
    a rejected candidate is counted under ``rejections.split`` and the row's next one drawn."""

    def prepare(self, rule: Rule, merged: dict[str, Any], where: str) -> dict[str, Any]:
        if merged.get("generator") in POOL_CELLS and merged.get("role") == "train":
            comps = (merged.get("options") or {}).get("compositions")
            if isinstance(comps, dict) and self.admitter(rule, "train") is not None:
                merged = {**merged, "options": {**merged["options"], "compositions": {**comps, "split": rule.config}}}
        return merged

    def wrap(self, rule: Rule, gen: Any, role: str, generator: str, where: str) -> Any:
        admit = self.admitter(rule, role)
        if admit is None:
            return gen
        if generator in POOL_CELLS:
            return gen  # its composition pool drew under compositions.split; the certificate checks the rows
        if not gen.REDRAWABLE:
            raise SplitError(f"{where}: generator {generator!r} plans its rows and cannot redraw one that breaks "
                             f"the {self.name} split; use a generator that draws rows (trees, chains, atomic, "
                             f"rl_pool) or sft_cell / matched_stream compositions")
        if role == "eval":
            self.probe(rule, gen, admit, generator, where)
        return filtered(gen, admit)

    def probe(self, rule: Rule, gen: Any, admit: Callable[[Item], bool], generator: str, where: str) -> None:
        """Before any row is drawn: an eval split whose rows must meet the rule can meet it at all. The
        first row of each depth the split draws (every row when it plans none) must find a candidate
        the rule admits within the generator's attempts, else the split is refused naming why."""
        plan = getattr(gen, "plan", None)
        rows: list[tuple[int, Any]] = [(0, None)]
        if plan is not None and hasattr(plan, "depth") and gen.count():
            firsts: dict[int, int] = {}
            for i in range(min(gen.count(), PROBE_ROWS)):
                firsts.setdefault(plan.depth(i), i)
            rows = [(i, d) for d, i in sorted(firsts.items())]
        counted = gen.rejections.copy()  # the probe's draws are not the build's: its counts stay as they were
        try:
            self._probe_rows(rule, gen, admit, generator, where, rows)
        finally:
            gen.rejections.clear()
            gen.rejections.update(counted)

    def _probe_rows(self, rule: Rule, gen: Any, admit: Callable[[Item], bool], generator: str, where: str,
                    rows: Sequence[tuple[int, Any]]) -> None:
        for i, depth in rows:
            j = 0
            while j < gen.max_attempts:
                try:
                    j, item = gen.first_valid(i, j)
                except (ValueError, OpgenError):
                    break  # no candidate meets the generator's own constraints: the build says so
                if admit(item):
                    break
                j += 1
            else:
                at = f"row {i}" + (f" (depth {depth})" if depth is not None else "")
                raise SplitError(f"{where}: no candidate of {at} of this eval split ({generator}) meets the "
                                 f"{self.name} split's eval rule in {gen.max_attempts} draws: "
                                 f"{self.impossible(rule, depth)}")

    def impossible(self, rule: Rule, depth: int | None) -> str:
        """Why an eval split's rows cannot meet the rule, in words (for :meth:`probe`'s refusal)."""
        return "its rows cannot hold what the split requires of eval rows"


# Rows of an eval split :meth:`FilterKind.probe` scans for the depths it draws (a depth plan cycles or blocks).
PROBE_ROWS = 4096


def filtered(gen: Any, admit: Callable[[Item], bool]) -> Any:
    """``gen`` whose rows are its first candidates ``admit`` accepts (the others counted as ``split``)."""
    base_first_valid = gen.first_valid

    def first_valid(i: int, start: int = 0) -> tuple[int, Item]:
        j, stop = start, start + gen.max_attempts
        while j < stop:
            j, item = base_first_valid(i, j)
            if admit(item):
                return j, item
            gen.rejections["split"] += 1
            j += 1
        raise gen.no_candidate(i, start)

    def first_valid_many(start: int, stop: int) -> list[tuple[int, Item]]:
        return [first_valid(i) for i in range(start, stop)]

    # instance attributes: the generator's own class (its manifest sections, build summaries) stays
    gen.first_valid = first_valid
    gen.first_valid_many = first_valid_many
    return gen


class HeldKind(FilterKind):
    """A filter kind that holds something out of training (pairs, operators): a training row may hold
    none of it; an eval row must hold some when the rule's ``data.eval_requires`` says so."""

    def admitter(self, rule: Rule, role: str) -> Callable[[Item], bool] | None:
        if role == "train":
            return lambda item: not any(self.tree_holds_heldout(rule, t.program) for t in item.tasks)
        if rule.data.eval_requires:
            return lambda item: any(self.tree_holds_heldout(rule, t.program) for t in item.tasks)
        return None


def check_heldout(cert: dict[str, Any], check: dict[str, Any], problems: list[str], train_holds: Sequence[bool],
                  eval_holds: Sequence[bool], eval_requires: bool) -> None:
    """The check of a kind that holds compounds out of training (whether each training and each eval
    row holds one): no training row holds one (and, under ``eval: require``, every eval row does)."""
    bad = [i for i, h in enumerate(train_holds) if h]
    check["train_rows_with_heldout_compound"] = len(bad)
    check["examples"] = bad[:5]
    if bad:
        problems.append(f"{len(bad)} training rows hold a held-out compound (rows {bad[:5]})")
    with_h, n_eval = sum(map(bool, eval_holds)), len(eval_holds)
    cert["heldout_share_of_eval_rows"] = round(with_h / n_eval, 6) if n_eval else 0.0
    if eval_requires:
        check["eval_rows_without_heldout_compound"] = n_eval - with_h
        if with_h < n_eval:
            problems.append(f"{n_eval - with_h} eval rows hold no held-out compound (eval: require)")
