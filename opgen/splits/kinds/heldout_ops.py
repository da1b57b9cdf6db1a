"""``heldout-ops``: operators training never composes (the study's own split, docs/splits.md).

Training rows never compose a held-out operator with any node; eval rows have no rule unless
``eval: require`` (the study's eval suite, byte for byte).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opgen import expr
from opgen.ops import OperatorLibrary
from opgen.splits import compounds
from opgen.splits.kinds.base import OP_SET, HeldKind, Read, Rule, check_heldout, op_set, tokens


@dataclass(frozen=True)
class HeldOps:
    ops: frozenset[str]  # operators never composed in training
    eval_requires: bool


class HeldoutOps(HeldKind):
    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: compounds.CompoundSpec, where: str,
                seed: int, lib: OperatorLibrary) -> Rule:
        held = op_set(raw.get("ops", "heldout"), f"{where}.ops", lib)
        config.update({"ops": list(held), "eval": raw.get("eval", "any")})
        return Rule(self, config, spec, where, HeldOps(frozenset(held), config["eval"] == "require"), library=lib)

    def tree_holds_heldout(self, rule: Rule, tree: expr.Expr) -> bool:
        held = rule.data.ops
        return any(p in held or c in held for p, _, c in compounds.edges(tree))

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        held = set(rule.data.ops)
        cert["heldout_compounds"] = f"every compound with one of {', '.join(rule.config['ops'])}"

        def holds(u: compounds.RowUnits) -> set[str]:  # the held-out operators the row composes
            return set().union(*(tokens(c) & held for c in u.compounds))

        in_eval = [holds(u) for u in read.evals]
        check_heldout(cert, check, problems, [bool(holds(u)) for u in read.train], [bool(h) for h in in_eval],
                      rule.data.eval_requires)
        tested = set().union(*in_eval)
        position = rule.library.position
        cert["heldout_tested"] = sorted(tested, key=position.__getitem__)  # held-out operators eval rows compose
        cert["heldout_untested"] = sorted(held - tested, key=position.__getitem__)


KIND = HeldoutOps("heldout-ops", "training rows never compose a held-out operator; eval rows have no rule",
                  {"ops": OP_SET, "eval": {"enum": ["require", "any"]}}, compound_only=False)
