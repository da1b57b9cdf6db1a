"""``productivity``: deeper programs than training shows (docs/splits.md).

Training rows are at most ``max_train_depth`` deep, eval rows deeper; a split whose ``depths``
option lies on the wrong side is refused before any row is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opgen import expr
from opgen.ops import OperatorLibrary
from opgen.splits import compounds
from opgen.splits.kinds.base import FilterKind, Read, Rule, SplitError
from opgen.tasks import Item


@dataclass(frozen=True)
class Depth:
    max_train_depth: int


class Productivity(FilterKind):
    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: compounds.CompoundSpec, where: str,
                seed: int, lib: OperatorLibrary) -> Rule:
        config["max_train_depth"] = raw["max_train_depth"]
        return Rule(self, config, spec, where, Depth(raw["max_train_depth"]), library=lib)

    def admitter(self, rule: Rule, role: str) -> Callable[[Item], bool] | None:
        d = rule.data.max_train_depth
        if role == "train":
            return lambda item: max(expr.depth(t.program) for t in item.tasks) <= d
        return lambda item: max(expr.depth(t.program) for t in item.tasks) > d

    def prepare(self, rule: Rule, merged: dict[str, Any], where: str) -> dict[str, Any]:
        merged = super().prepare(rule, merged, where)
        role = merged.get("role")
        depths = (merged.get("options") or {}).get("depths")
        d = rule.data.max_train_depth
        if isinstance(depths, list) and all(isinstance(x, int) for x in depths):
            wrong = [x for x in depths if (x > d if role == "train" else x <= d)]
            if wrong:
                side = f"at most {d}" if role == "train" else f"above {d}"
                raise SplitError(f"{where}.options.depths: {wrong} — a {role} split of a productivity split "
                                 f"(max_train_depth {d}) has depths {side}")
        return merged

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        d = rule.data.max_train_depth
        deep = [i for i, x in enumerate(read.train_depths) if x > d]
        shallow = [i for i, x in enumerate(read.eval_depths) if x <= d]
        cert["heldout_compounds"] = f"programs deeper than {d}"
        cert["depths"] = {"train_max": max(read.train_depths, default=None),
                          "eval_min": min(read.eval_depths, default=None)}
        check["train_rows_deeper_than_max"] = len(deep)
        check["eval_rows_not_deeper"] = len(shallow)
        if deep:
            problems.append(f"{len(deep)} training rows are deeper than {d} (rows {deep[:5]})")
        if shallow:
            problems.append(f"{len(shallow)} eval rows are not deeper than {d} (rows {shallow[:5]})")


KIND = Productivity("productivity", "training rows at most max_train_depth deep; eval rows deeper",
                    {"max_train_depth": {"type": "integer", "minimum": 1}}, ("max_train_depth",))
