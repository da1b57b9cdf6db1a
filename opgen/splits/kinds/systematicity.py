"""``systematicity``: known operators in combinations training never shows (docs/splits.md).

Training rows never compose a held-out pair of operators; eval rows hold at least one (``eval:
require``, the default). The pairs are named (``pairs``) or a seeded share of all unordered pairs
of ``ops`` (an operator with itself included). What "compose" means is the ``rule``:

- ``path`` (the default): the two operators never lie on one root-to-leaf path, at any distance
  and whatever lies between them (builtins ``+`` and methods included): ``func_3(func_4(func_9(x)))``
  and ``func_3((func_9(x) + 'ab'))`` compose func_3 with func_9;
- ``adjacent``: never parent and child (either direction, any argument position), the rule of
  opgen before 0.5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opgen import expr
from opgen.ops import OperatorLibrary
from opgen.rng import Rng
from opgen.splits import compounds
from opgen.splits.kinds.base import (
    OP_SET,
    PAIR,
    HeldKind,
    Read,
    Rule,
    SplitError,
    canon,
    check_heldout,
    op_set,
    tokens,
)

RULES = ("path", "adjacent")


@dataclass(frozen=True)
class Pairs:
    pairs: frozenset[frozenset[str]]  # operator pairs never composed in training
    eval_requires: bool  # eval rows must hold a held-out pair
    path: bool  # the rule: on one root-to-leaf path (True) or parent and child
    partners: Mapping[str, frozenset[str]]  # each operator of a pair → the operators it may not meet


def path_text(above: str, below: str) -> str:
    """The held-out compound of ``below`` anywhere under ``above``: ``func_3(..func_9)``."""
    return f"{above}(..{below})"


def path_pairs(trees: Sequence[expr.Expr]) -> frozenset[tuple[str, str]]:
    """Every (operator above, operator below) on one root-to-leaf path of the trees, at any distance."""
    out: set[tuple[str, str]] = set()
    for tree in trees:
        stack: list[tuple[expr.Expr, tuple[str, ...]]] = [(tree, ())]
        while stack:
            node, above = stack.pop()
            if isinstance(node, expr.Call):
                out.update((a, node.op) for a in above)
                above = (*above, node.op) if node.op not in above else above
            stack.extend((kid, above) for kid in expr.children(node))
    return frozenset(out)


class Systematicity(HeldKind):
    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: compounds.CompoundSpec, where: str,
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
        config["rule"] = raw.get("rule", "path")
        partners: dict[str, set[str]] = {}
        for a, b in unique:
            partners.setdefault(a, set()).add(b)
            partners.setdefault(b, set()).add(a)
        data = Pairs(frozenset(frozenset(p) for p in unique), config["eval"] == "require", config["rule"] == "path",
                     {k: frozenset(v) for k, v in partners.items()})
        return Rule(self, config, spec, where, data, library=lib)

    def tree_holds_heldout(self, rule: Rule, tree: expr.Expr) -> bool:
        data: Pairs = rule.data
        if not data.path:
            return any(frozenset((p, c)) in data.pairs for p, _, c in compounds.edges(tree))
        partners = data.partners
        stack: list[tuple[expr.Expr, frozenset[str]]] = [(tree, frozenset())]
        while stack:
            node, above = stack.pop()
            if isinstance(node, expr.Call):
                mine = partners.get(node.op)
                if mine is not None and not mine.isdisjoint(above):
                    return True
                above = above | {node.op}
            stack.extend((kid, above) for kid in expr.children(node))
        return False

    def impossible(self, rule: Rule, depth: int | None) -> str:
        pairs = ", ".join(f"[{', '.join(sorted(p) * (2 if len(p) == 1 else 1))}]" for p in
                          sorted(rule.data.pairs, key=sorted))
        how = ("both on one root-to-leaf path (rule: path)" if rule.data.path else
               "one directly inside the other (rule: adjacent)")
        selfish = [sorted(p)[0] for p in rule.data.pairs if len(p) == 1]
        hint = (f"; a pair of an operator with itself ({', '.join(selfish)}) needs it twice on one path, which "
                "a generator that never repeats an operator back to back (chains' no_repeat) draws only "
                "with another operator between (depth 3 or more) and never under the adjacent rule") if selfish else ""
        at = f" at depth {depth}" if depth is not None else ""
        return (f"its candidates{at} never hold a held-out pair {how} (pairs {pairs}){hint}. Name pairs its "
                "operators can compose at every depth it draws, drop those depths, or set eval: any")

    def heldout_compounds(self, rule: Rule) -> list[str]:
        """The compounds the rule holds out: ``func_3(..func_9)`` (func_9 anywhere under func_3) for the
        path rule, the edges ``func_3(func_9)`` (each argument position) for the adjacent one."""
        out: set[str] = set()
        for pair in rule.data.pairs:
            a, b = (sorted(pair) * 2)[:2]
            for p, c in ((a, b), (b, a)):
                if rule.data.path:
                    out.add(path_text(p, c))
                else:
                    out.update(compounds.edge_text(p, pos, c,
                                                   rule.library) for pos in range(compounds.arity_of(p, rule.library)))
        return sorted(out)

    def row_fact(self, rule: Rule, trees: Sequence[expr.Expr]) -> frozenset[str]:
        """The held-out compounds the row holds (path texts or edge texts, as the rule says)."""
        data: Pairs = rule.data
        if data.path:
            return frozenset(path_text(a, b) for a, b in path_pairs(trees) if frozenset((a, b)) in data.pairs)
        return frozenset(compounds.edge_text(p, pos, c, rule.library) for t in trees for p, pos, c in compounds.edges(t)
                         if frozenset((p, c)) in data.pairs)

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        listed = self.heldout_compounds(rule)
        cert["rule"] = rule.config["rule"]
        cert["heldout_compounds"] = listed
        check_heldout(cert, check, problems, [bool(f) for f in read.train_facts], [bool(f) for f in read.eval_facts],
                      rule.data.eval_requires)
        tested = set().union(*read.eval_facts) if read.eval_facts else set()
        cert["heldout_tested"] = sorted(tested)
        cert["heldout_untested"] = sorted(set(listed) - tested)
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
     "rule": {"enum": list(RULES), "description": "path: a held-out pair never on one root-to-leaf path (default); "
              "adjacent: never parent and child"},
     "drawn": {"type": "object", "description": "how 'share' drew the pairs (a manifest's record; ignored on read)"}})
