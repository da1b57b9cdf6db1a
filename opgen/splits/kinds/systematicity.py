"""``systematicity``: known operators in combinations training never shows (docs/splits.md).

Training rows never compose a held-out pair of operators (either direction, any argument
position); eval rows hold at least one (``eval: require``, the default). The pairs are named
(``pairs``) or a seeded share of all unordered pairs of ``ops`` (an operator with itself included).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opgen import expr as E
from opgen.ops import OperatorLibrary
from opgen.rng import Rng
from opgen.splits import compounds as C
from opgen.splits.kinds.base import (
    OP_SET,
    PAIR,
    FilterKind,
    Read,
    Rule,
    SplitError,
    canon,
    check_heldout,
    op_set,
    tokens,
)
from opgen.tasks import Item


@dataclass(frozen=True)
class Pairs:
    pairs: frozenset[frozenset[str]]  # operator pairs never composed in training
    eval_requires: bool  # eval rows must hold a held-out pair


class Systematicity(FilterKind):
    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: C.CompoundSpec, where: str,
                seed: int, lib: OperatorLibrary) -> Rule:
        if ("pairs" in raw) == ("share" in raw):
            raise SplitError(f"{where}: give exactly one of 'pairs' (named operator pairs) or 'share' (a random "
                             "share of all pairs)")
        universe = op_set(raw.get("ops", "all"), f"{where}.ops", lib)
        position = lib.position  # the library's own order (the study's: func_0 .. func_24)
        if "pairs" in raw:
            pairs = []
            for k, pair in enumerate(raw["pairs"]):
                for o in pair:
                    if o not in position:
                        raise SplitError(f"{where}.pairs[{k}]: unknown operator {o!r} (not in library {lib.name!r})")
                pairs.append(tuple(sorted(pair, key=position.__getitem__)))
            if "drawn" in raw:
                config["drawn"] = raw["drawn"]
        else:
            # every unordered pair of the operators (a with itself included: func_3(func_3(x)) composes
            # func_3 with itself), a seeded share of them; rounded, at least one
            everything = [(a, b) for i, a in enumerate(universe) for b in universe[i:]]
            n = max(1, round(raw["share"] * len(everything)))
            rng = Rng("opgen-split", "systematicity", seed, canon(list(universe)), str(raw["share"]))
            drawn = rng.sample(everything, n)
            pairs = sorted(drawn, key=lambda p: (position[p[0]], position[p[1]]))
            # the resolved form names the pairs (what a rebuild reads back) and records how they were drawn
            config["drawn"] = {"share": raw["share"], "ops": list(universe), "seed": seed}
        unique = sorted(set(pairs), key=lambda p: (position[p[0]], position[p[1]]))
        config["pairs"] = [list(p) for p in unique]
        config["eval"] = raw.get("eval", "require")
        data = Pairs(frozenset(frozenset(p) for p in unique), config["eval"] == "require")
        return Rule(self, config, spec, where, data, library=lib)

    def heldout_edge(self, rule: Rule, parent: str, child: str) -> bool:
        return frozenset((parent, child)) in rule.data.pairs

    def tree_holds_heldout(self, rule: Rule, tree: E.Expr) -> bool:
        return any(self.heldout_edge(rule, p, c) for p, _, c in C.edges(tree))

    def admitter(self, rule: Rule, role: str) -> Callable[[Item], bool] | None:
        if role == "train":
            return lambda item: not any(self.tree_holds_heldout(rule, t.program) for t in item.tasks)
        if rule.data.eval_requires:
            return lambda item: any(self.tree_holds_heldout(rule, t.program) for t in item.tasks)
        return None

    def heldout_compounds(self, rule: Rule) -> list[str]:
        out: set[str] = set()
        for pair in rule.data.pairs:
            a, b = (sorted(pair) * 2)[:2]
            for p, c in ((a, b), (b, a)):
                out.update(C.edge_text(p, pos, c, rule.lib) for pos in range(C.arity_of(p, rule.lib)))
        return sorted(out)

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        listed = self.heldout_compounds(rule)
        held = set(listed)
        cert["heldout_compounds"] = listed
        check_heldout(cert, check, problems, read, lambda u: bool(held.intersection(u.compounds)),
                      rule.data.eval_requires)
        if read.train:
            composed = set().union(*(tokens(c) for u in read.train for c in u.compounds))
            position = rule.library.position  # the library's own order (the study's: func_0 .. func_24)
            needed = sorted({o for p in rule.data.pairs for o in p}, key=position.__getitem__)
            missing = [o for o in needed if o not in composed]
            check["pair_operators_composed_in_training"] = {o: o in composed for o in needed}
            if missing:
                # a fact of this build, not a failure: another training build of the same split (the SFT
                # cell beside an RL pool of unary chains) may compose them
                check.setdefault("warnings", []).append(
                    f"operators {', '.join(missing)} of the held-out pairs are never composed (with any operator) "
                    "in this build's training rows: a systematicity split tests known operators in new combinations")


KIND = Systematicity(
    "systematicity", "training rows never compose a held-out operator pair; eval rows hold one",
    {"pairs": {"type": "array", "items": PAIR, "minItems": 1},
     "share": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
     "ops": OP_SET,
     "eval": {"enum": ["require", "any"]},
     "drawn": {"type": "object", "description": "how 'share' drew the pairs (a manifest's record; ignored on read)"}})
