"""``mcd``: the split of a pool that maximizes compound divergence at small atom divergence (DBCA,
Keysers et al., ICLR 2020; the search is opgen.splits.mcd, docs/splits.md).

Its splits take their rows from the search's sides (the ``mcd_side`` generator); a training split
may name a generator instead: ``sft_cell`` / ``matched_stream`` compose the search's train side, a
generator that draws rows draws again around the search's held-out compounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opgen.ops import OperatorLibrary
from opgen.splits import compounds, mcd
from opgen.splits.generator import McdSide
from opgen.splits.kinds.base import POOL_CELLS, Read, Rule, SplitError, SplitKind, filtered
from opgen.tasks import Item

# The name a cell's compositions on an mcd split get in its manifest when the recipe gives none.
MCD_POOL_NAME = "mcd-train"
# The fields of one search only (a recipe naming one for another search is refused).
SEARCH_FIELDS = {"candidates": ("greedy", "anneal"), "steps": ("anneal",), "temperature": ("anneal",),
                 "target_compound_divergence": ("exchange",), "match_depths": ("exchange",)}


class Mcd(SplitKind):
    def resolve(self, raw: Mapping[str, Any], config: dict[str, Any], spec: compounds.CompoundSpec, where: str,
                seed: int, lib: OperatorLibrary) -> Rule:
        method = raw.get("search", mcd.DEFAULT_SEARCH)
        config.update({"pool": {"generator": raw["pool"]["generator"], "options": raw["pool"].get("options", {}),
                                "rows": raw["pool"]["rows"]},
                       "train_rows": raw["train_rows"], "eval_rows": raw["eval_rows"],
                       "max_atom_divergence": raw.get("max_atom_divergence", mcd.DEFAULT_ATOM_BOUND),
                       "search": method, "rounds": raw.get("rounds", mcd.DEFAULT_ROUNDS)})
        # each search's own fields, in the resolved config only when that search is chosen
        for key, searches in SEARCH_FIELDS.items():
            if key in raw and method not in searches:
                named = " and ".join({"anneal": "annealed"}.get(s, s) for s in searches)
                takes = "searches take" if len(searches) > 1 else "search takes"
                raise SplitError(f"{where}.{key}: only the {named} {takes} it (search: {method})")
        if method in ("greedy", "anneal"):
            config["candidates"] = raw.get("candidates", mcd.DEFAULT_CANDIDATES)
        if method == "anneal":
            config.update({"steps": raw.get("steps", mcd.DEFAULT_STEPS),
                           "temperature": raw.get("temperature", mcd.DEFAULT_TEMPERATURE)})
        if method == "exchange":
            config["match_depths"] = raw.get("match_depths", True)
        for key in ("target_compound_divergence", "replicate"):
            if key in raw:
                config[key] = raw[key]
        if config["train_rows"] + config["eval_rows"] > config["pool"]["rows"]:
            raise SplitError(f"{where}.pool.rows: {config['pool']['rows']} pool rows cannot give train_rows "
                             f"{config['train_rows']} + eval_rows {config['eval_rows']}")
        return Rule(self, config, spec, where, library=lib)

    def selection(self, rule: Rule, seed: int) -> tuple[list[Any], mcd.Selection]:
        """The pool's items and the search's selection for ``seed`` (run once per build, cached)."""
        return mcd.pool_and_selection(rule.config, seed, rule.where.rsplit("split", 1)[0], rule.library)

    def prepare(self, rule: Rule, merged: dict[str, Any], where: str) -> dict[str, Any]:
        """An mcd recipe's split: the search's side (``mcd_side``), or a training cell on its train side."""
        role, generator = merged.get("role"), merged.get("generator")
        if generator in (None, McdSide.NAME):
            if role not in ("train", "eval"):
                raise SplitError(f"{where}.role: 'role' is required (train or eval)")
            return {**merged, "generator": McdSide.NAME,
                    "options": {"side": role, "split": rule.config, **dict(merged.get("options") or {})}}
        if role != "train":
            raise SplitError(f"{where}.generator: an eval split of an mcd recipe takes its rows from the search's "
                             f"eval side; leave 'generator' out (got {generator!r})")
        if generator not in POOL_CELLS:
            return merged  # a generator that draws rows: wrap() holds its candidates to the search's H
        options = dict(merged.get("options") or {})
        comps = options.get("compositions")
        if comps is None:
            return merged  # atomic rows only: nothing composed
        if not isinstance(comps, dict):
            raise SplitError(f"{where}.options.compositions: expected a mapping ({{rows: N}}: the first N rows of "
                             "the search's train side)")
        foreign = sorted(set(comps) - {"pool", "rows", "split"})
        if foreign:
            raise SplitError(f"{where}.options.compositions.{foreign[0]}: on an mcd split the compositions are the "
                             "search's train side (their operators and depths are split.pool's); give only "
                             "'rows' (and a 'pool' name for the manifest)")
        rows = comps.get("rows", rule.config["train_rows"])
        if not isinstance(rows, int) or isinstance(rows, bool) or not 1 <= rows <= rule.config["train_rows"]:
            raise SplitError(f"{where}.options.compositions.rows: {rows!r} — the search's train side has "
                             f"train_rows {rule.config['train_rows']} rows; ask for 1 to that many")
        options["compositions"] = {"pool": comps.get("pool", MCD_POOL_NAME), "rows": rows, "split": rule.config}
        return {**merged, "options": options}

    def wrap(self, rule: Rule, gen: Any, role: str, generator: str, where: str) -> Any:
        if role != "train" or generator == McdSide.NAME or generator in POOL_CELLS:
            return gen  # the search's own rows, or a cell whose compositions are its train side
        if not gen.REDRAWABLE:
            raise SplitError(f"{where}: generator {generator!r} plans its rows and cannot redraw one that holds "
                             "a compound the mcd search held out; leave 'generator' out (the search's train "
                             "side), or use sft_cell / matched_stream or a generator that draws rows")
        try:
            held = frozenset(self.selection(rule, gen.ctx.seed)[1].heldout)
        except ValueError as exc:
            raise SplitError(str(exc)) from None
        spec = rule.spec

        def admit_mcd(item: Item) -> bool:
            units = compounds.row_units([t.program for t in item.tasks], [t.input for t in item.tasks], spec)
            return not held.intersection(units.compounds)

        return filtered(gen, admit_mcd)

    def claims(self, rule: Rule, recipe: Any, sections: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """What the search claims (its ``mcd_side`` splits' manifest section, else the search itself,
        re-run from the recipe), and whether the training splits are the search's own rows."""
        found = next((s["mcd"] for s in sections if s.get("mcd")), None)
        if found is None:
            items, sel = mcd.pool_and_selection(rule.config, recipe.seed, f"{recipe.path}: ", recipe.library)
            found = mcd.section(len(items), sel)
        cells = sorted({s.generator for s in recipe.splits if s.role == "train" and s.generator != McdSide.NAME})
        return {**found, "train_generators": cells}

    def check(self, rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
              read: Read) -> None:
        """The search's held-out compounds in no training row; its divergences those of the rows."""
        claims = read.claims
        held = list(claims.get("heldout_compounds", []))
        cert["heldout_compounds"] = held
        hs = set(held)
        bad = [i for i, u in enumerate(read.train) if hs & set(u.compounds)]
        check["train_rows_with_heldout_compound"] = len(bad)
        if bad:
            problems.append(f"{len(bad)} training rows hold a compound the search held out (rows {bad[:5]})")
        in_eval = [hs.intersection(u.compounds) for u in read.evals]
        with_h = sum(1 for h in in_eval if h)
        cert["heldout_share_of_eval_rows"] = round(with_h / len(read.evals), 6) if read.evals else 0.0
        tested = set().union(*in_eval)
        cert["heldout_tested"] = sorted(tested)
        cert["heldout_untested"] = sorted(hs - tested)
        cert["search"] = {k: claims[k] for k in ("search", "pool_rows", "atom_divergence", "compound_divergence",
                                                 "baseline", "rounds", "anneal_steps", "anneal_accepted",
                                                 "target_compound_divergence") if k in claims}
        bound = rule.config["max_atom_divergence"]
        cells = list(claims.get("train_generators") or [])
        if cells:
            # training cells on the search's train side (atomic rows beside its compositions): their D_A and
            # D_C are measured from their rows; the bound and the search's D_C are of its own selection
            cert["train_cells"] = cells
            check.setdefault("warnings", []).append(
                f"the training splits are built by {', '.join(cells)} on the search's train side: D_A and D_C are "
                "measured from their rows (atomic rows included); max_atom_divergence bounds the search's own "
                f"selection (search.atom_divergence {claims.get('atom_divergence')})")
            return
        if read.train and read.evals:
            whole = len(read.train) == claims.get("train_rows") and len(read.evals) == claims.get("eval_rows")
            if whole and cert["atom_divergence"] > bound + 1e-9:
                problems.append(f"atom divergence {cert['atom_divergence']} exceeds max_atom_divergence {bound}")
            if not whole:
                check.setdefault("warnings", []).append(
                    f"a part of the selection was built (--limit): {len(read.train)} of {claims.get('train_rows')} "
                    f"train and {len(read.evals)} of {claims.get('eval_rows')} eval rows; the search's divergences "
                    "are of the whole")
            elif claims.get("compound_divergence") is not None and \
                    abs(cert["compound_divergence"] - claims["compound_divergence"]) > 1e-5:
                problems.append(f"the rows' compound divergence {cert['compound_divergence']} is not the "
                                f"search's {claims['compound_divergence']}")


KIND = Mcd(
    "mcd", "train and eval rows selected from one pool for the largest compound divergence at small atom divergence",
    {"pool": {"type": "object", "additionalProperties": False, "required": ["generator", "rows"],
              "properties": {"generator": {"type": "string"}, "options": {"type": "object"},
                             "rows": {"type": "integer", "minimum": 2}}},
     "train_rows": {"type": "integer", "minimum": 1},
     "eval_rows": {"type": "integer", "minimum": 1},
     "max_atom_divergence": {"type": "number", "minimum": 0, "maximum": 1},
     "search": {"enum": list(mcd.SEARCHES)},
     "rounds": {"type": "integer", "minimum": 0, "description": "search rounds at most"},
     "candidates": {"type": "integer", "minimum": 1, "description": "compounds tried per greedy round"},
     "steps": {"type": "integer", "minimum": 0, "description": "annealing moves after the greedy rounds"},
     "temperature": {"type": "number", "minimum": 0, "description": "annealing's starting temperature (D_C)"},
     "target_compound_divergence": {"type": "number", "minimum": 0, "maximum": 1,
                                    "description": "stop once D_C reaches this (a divergence sweep's level)"},
     "match_depths": {"type": "boolean", "description": "exchange: move rows only for rows of the same depth, "
                      "so train and eval keep a random split's depth mix (default true)"},
     "replicate": {"type": "integer", "minimum": 0,
                   "description": "another search over the same pool (its seed; the pool stays)"}},
    ("pool", "train_rows", "eval_rows"))
