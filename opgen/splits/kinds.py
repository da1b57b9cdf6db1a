"""The split kinds a recipe names (``split: {kind: ...}``, docs/splits.md): one object per kind.

A kind turns the recipe's ``split`` mapping into a :class:`Rule`: what a training row and an eval
row may hold. Filter kinds (``systematicity``, ``heldout-ops``, ``productivity``) pass each
split's generator a rule its candidates must meet (a rejected candidate is counted as ``split``
and the row's next candidate is drawn, as for any local constraint); ``mcd`` selects train and
eval rows from one pool (opgen.splits.mcd). Every rule is deterministic from the recipe and seed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opgen import expr as E
from opgen import schemacheck
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import Rng
from opgen.splits import compounds as C
from opgen.tasks import Item


class SplitError(ValueError, OpgenError):
    """A ``split`` that cannot be used; the message starts with ``<file>: split.<field>:``."""

    exit_code = 1


# an operator id: any library's (a Python name); which ids exist is the recipe's library's to say
OP_ID: dict[str, Any] = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
OP_SET: dict[str, Any] = {"oneOf": [{"enum": ["train", "heldout", "all"]},
                                    {"type": "array", "items": OP_ID, "minItems": 1}]}
COMPOUNDS = {"type": "object", "additionalProperties": False,
             "properties": {"max_size": {"type": "integer", "minimum": 2, "maximum": C.MAX_SIZE_LIMIT},
                            "leaves": {"type": "boolean"}, "inputs": {"type": "boolean"}}}
PAIR = {"type": "array", "items": OP_ID, "minItems": 2, "maxItems": 2}


def _schema(required: list[str], props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["kind", *required],
            "properties": {"kind": {"type": "string"}, "compounds": COMPOUNDS, "description": {"type": "string"},
                           **props}}


SCHEMAS: dict[str, dict[str, Any]] = {
    "systematicity": _schema([], {
        "pairs": {"type": "array", "items": PAIR, "minItems": 1},
        "share": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "ops": OP_SET,
        "eval": {"enum": ["require", "any"]},
        "drawn": {"type": "object", "description": "how 'share' drew the pairs (a manifest's record; ignored on read)"},
    }),
    "heldout-ops": _schema([], {"ops": OP_SET, "eval": {"enum": ["require", "any"]}}),
    "productivity": _schema(["max_train_depth"], {"max_train_depth": {"type": "integer", "minimum": 1}}),
    "mcd": _schema(["pool", "train_rows", "eval_rows"], {
        "pool": {"type": "object", "additionalProperties": False, "required": ["generator", "rows"],
                 "properties": {"generator": {"type": "string"}, "options": {"type": "object"},
                                "rows": {"type": "integer", "minimum": 2}}},
        "train_rows": {"type": "integer", "minimum": 1},
        "eval_rows": {"type": "integer", "minimum": 1},
        "max_atom_divergence": {"type": "number", "minimum": 0, "maximum": 1},
        "candidates": {"type": "integer", "minimum": 1, "description": "compounds tried per greedy round"},
        "rounds": {"type": "integer", "minimum": 0, "description": "greedy rounds at most"},
        "search": {"enum": ["greedy", "anneal"]},
        "steps": {"type": "integer", "minimum": 0, "description": "annealing moves after the greedy rounds"},
        "temperature": {"type": "number", "minimum": 0, "description": "annealing's starting temperature (D_C)"},
    }),
}
KINDS = tuple(SCHEMAS)
# The generators that plan their rows from composition pools: a split reaches their pools
# through ``compositions.split`` (opgen/generate/cells.py), not through a redraw.
POOL_CELLS = ("sft_cell", "matched_stream")
# The name a cell's compositions on an mcd split get in its manifest when the recipe gives none.
MCD_POOL_NAME = "mcd-train"


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Rule:
    """A resolved split: its kind, its resolved config (what the manifest shows) and its compounds."""

    kind: str
    config: dict[str, Any]
    spec: C.CompoundSpec
    where: str
    pairs: frozenset[frozenset[str]] = frozenset()  # systematicity: operator pairs never composed in training
    ops: frozenset[str] = frozenset()  # heldout-ops: operators never composed in training
    eval_requires: bool = False  # eval rows must hold a held-out compound
    max_train_depth: int | None = None  # productivity
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the recipe's operator library: the rule's operators, pairs and mcd pool are its (not config:
    # the study's resolved config, and so its digests, stay as they were)
    library: OperatorLibrary = field(default=STUDY, compare=False)

    # ------------------------------------------------------------ the held-out compounds

    def heldout_edge(self, parent: str, child: str) -> bool:
        if self.kind == "systematicity":
            return frozenset((parent, child)) in self.pairs
        if self.kind == "heldout-ops":
            return parent in self.ops or child in self.ops
        return False

    def tree_holds_heldout(self, tree: E.Expr) -> bool:
        return any(self.heldout_edge(p, c) for p, _, c in C.edges(tree))

    def heldout_compounds(self) -> list[str] | None:
        """Every compound text the rule holds out (edges), when they can be listed; else None."""
        if self.kind == "systematicity":
            out: set[str] = set()
            for pair in self.pairs:
                a, b = (sorted(pair) * 2)[:2]
                for p, c in ((a, b), (b, a)):
                    out.update(C.edge_text(p, pos, c, self.library) for pos in range(C.arity_of(p, self.library)))
            return sorted(out)
        return None

    # ------------------------------------------------------------ what a row may be

    def admitter(self, role: str) -> Callable[[Item], bool] | None:
        """The test a candidate row of a split of ``role`` must pass (None: every row passes)."""
        if self.kind in ("systematicity", "heldout-ops"):
            if role == "train":
                return lambda item: not any(self.tree_holds_heldout(t.program) for t in item.tasks)
            if self.eval_requires:
                return lambda item: any(self.tree_holds_heldout(t.program) for t in item.tasks)
            return None
        if self.kind == "productivity":
            d = self.max_train_depth
            assert d is not None
            if role == "train":
                return lambda item: max(E.depth(t.program) for t in item.tasks) <= d
            return lambda item: max(E.depth(t.program) for t in item.tasks) > d
        return None

    def prepare(self, merged: dict[str, Any], where: str) -> dict[str, Any]:
        """A recipe split (defaults merged in) adapted to this rule, before its generator checks it."""
        role = merged.get("role")
        if self.kind == "mcd":
            return self._prepare_mcd(merged, where)
        if merged.get("generator") in POOL_CELLS and role == "train":
            comps = (merged.get("options") or {}).get("compositions")
            if isinstance(comps, dict) and self.admitter("train") is not None:
                merged = {**merged, "options": {**merged["options"], "compositions": {**comps, "split": self.config}}}
        if self.kind == "productivity":
            depths = (merged.get("options") or {}).get("depths")
            d = self.max_train_depth
            assert d is not None
            if isinstance(depths, list) and all(isinstance(x, int) for x in depths):
                wrong = [x for x in depths if (x > d if role == "train" else x <= d)]
                if wrong:
                    side = f"at most {d}" if role == "train" else f"above {d}"
                    raise SplitError(f"{where}.options.depths: {wrong} — a {role} split of a productivity split "
                                     f"(max_train_depth {d}) has depths {side}")
        return merged

    def _prepare_mcd(self, merged: dict[str, Any], where: str) -> dict[str, Any]:
        """An mcd recipe's split: the search's side (``mcd_side``), or a training cell on its train side."""
        role, generator = merged.get("role"), merged.get("generator")
        if generator in (None, "mcd_side"):
            if role not in ("train", "eval"):
                raise SplitError(f"{where}.role: 'role' is required (train or eval)")
            return {**merged, "generator": "mcd_side",
                    "options": {"side": role, "split": self.config, **dict(merged.get("options") or {})}}
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
        rows = comps.get("rows", self.config["train_rows"])
        if not isinstance(rows, int) or isinstance(rows, bool) or not 1 <= rows <= self.config["train_rows"]:
            raise SplitError(f"{where}.options.compositions.rows: {rows!r} — the search's train side has "
                             f"train_rows {self.config['train_rows']} rows; ask for 1 to that many")
        options["compositions"] = {"pool": comps.get("pool", MCD_POOL_NAME), "rows": rows, "split": self.config}
        return {**merged, "options": options}

    def mcd_heldout(self, seed: int) -> frozenset[str]:
        """mcd: the search's held-out compounds H for ``seed`` (the search runs once per build, cached)."""
        from opgen.splits import mcd

        return frozenset(mcd.pool_and_selection(self.config, seed, self.where.rsplit("split", 1)[0],
                                                self.library)[1].heldout)

    def wrap(self, gen: Any, role: str, generator: str, where: str) -> Any:
        """``gen`` with its candidates held to this rule (a planned generator: checked, not redrawn)."""
        if self.kind == "mcd":
            if role != "train" or generator == "mcd_side" or generator in POOL_CELLS:
                return gen  # the search's own rows, or a cell whose compositions are its train side
            if not gen.REDRAWABLE:
                raise SplitError(f"{where}: generator {generator!r} plans its rows and cannot redraw one that holds "
                                 "a compound the mcd search held out; leave 'generator' out (the search's train "
                                 "side), or use sft_cell / matched_stream or a generator that draws rows")
            try:
                held = self.mcd_heldout(gen.ctx.seed)
            except ValueError as exc:
                raise SplitError(str(exc)) from None
            spec = self.spec

            def admit_mcd(item: Item) -> bool:
                units = C.row_units([t.program for t in item.tasks], [t.input for t in item.tasks], spec)
                return not held.intersection(units.compounds)

            return self._filtered(gen, admit_mcd)
        admit = self.admitter(role)
        if admit is None:
            return gen
        if generator in POOL_CELLS:
            return gen  # its composition pool drew under compositions.split; the certificate checks the rows
        if not gen.REDRAWABLE:
            raise SplitError(f"{where}: generator {generator!r} plans its rows and cannot redraw one that breaks "
                             f"the {self.kind} split; use a generator that draws rows (trees, chains, atomic, "
                             f"rl_pool) or sft_cell / matched_stream compositions")
        return self._filtered(gen, admit)

    @staticmethod
    def _filtered(gen: Any, admit: Callable[[Item], bool]) -> Any:
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

    def resolved(self) -> dict[str, Any]:
        return self.config


def _op_set(spec: Any, where: str, lib: OperatorLibrary = STUDY) -> tuple[str, ...]:
    try:
        return lib.resolve_set(spec)
    except (ValueError, KeyError) as exc:
        raise SplitError(f"{where}: {exc}") from None


def resolve(raw: Any, shown: str, seed: int, lib: OperatorLibrary = STUDY) -> Rule | None:
    """The recipe's ``split`` mapping → a :class:`Rule` over the operators of ``lib`` (the recipe's
    library; None when the recipe has none)."""
    if raw is None:
        return None
    where = f"{shown}: split"
    if isinstance(raw, str):  # `split: heldout-ops`: a kind whose fields all have defaults
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        raise SplitError(f"{where}: expected a mapping with a 'kind' (one of {', '.join(KINDS)})")
    kind = raw.get("kind")
    if kind not in SCHEMAS:
        raise SplitError(f"{where}.kind: {kind!r} is not a split kind (known: {', '.join(KINDS)})")
    schema = SCHEMAS[kind]
    if not schemacheck.surely_valid(schema, raw):
        errors = sorted(schemacheck.validator(schema).iter_errors(raw), key=lambda e: list(map(str, e.path)))
        if errors:
            err = errors[0]
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.path)
            extra = ""
            if err.validator == "additionalProperties":
                extra = f" (expected one of: {', '.join(sorted(schema['properties']))})"
            raise SplitError(f"{where}{path}: {err.message}{extra}")
    try:
        spec = C.CompoundSpec.from_dict(raw.get("compounds"), "compounds")
    except C.CompoundError as exc:
        raise SplitError(f"{where}.{exc}") from None
    config: dict[str, Any] = {"kind": kind, "compounds": spec.as_dict()}
    if raw.get("description"):
        config["description"] = raw["description"]
    if kind == "systematicity":
        return _systematicity(raw, config, spec, where, seed, lib)
    if kind == "heldout-ops":
        held = _op_set(raw.get("ops", "heldout"), f"{where}.ops", lib)
        config.update({"ops": list(held), "eval": raw.get("eval", "any")})
        return Rule(kind, config, spec, where, ops=frozenset(held), eval_requires=config["eval"] == "require",
                    library=lib)
    if kind == "productivity":
        config["max_train_depth"] = raw["max_train_depth"]
        return Rule(kind, config, spec, where, max_train_depth=raw["max_train_depth"], library=lib)
    # mcd
    from opgen.splits import mcd

    config.update({"pool": {"generator": raw["pool"]["generator"], "options": raw["pool"].get("options", {}),
                            "rows": raw["pool"]["rows"]},
                   "train_rows": raw["train_rows"], "eval_rows": raw["eval_rows"],
                   "max_atom_divergence": raw.get("max_atom_divergence", mcd.DEFAULT_ATOM_BOUND),
                   "candidates": raw.get("candidates", mcd.DEFAULT_CANDIDATES),
                   "rounds": raw.get("rounds", mcd.DEFAULT_ROUNDS)})
    _mcd_search(raw, config, where)
    if config["train_rows"] + config["eval_rows"] > config["pool"]["rows"]:
        raise SplitError(f"{where}.pool.rows: {config['pool']['rows']} pool rows cannot give train_rows "
                         f"{config['train_rows']} + eval_rows {config['eval_rows']}")
    return Rule(kind, config, spec, where, library=lib)


def _mcd_search(raw: Mapping[str, Any], config: dict[str, Any], where: str) -> None:
    """mcd's ``search``: the annealed search's fields go in the resolved config only when it is chosen,
    so a greedy split's resolved config (its search's seed stream) stays as it was."""
    from opgen.splits import mcd

    if raw.get("search", "greedy") == "anneal":
        config.update({"search": "anneal", "steps": raw.get("steps", mcd.DEFAULT_STEPS),
                       "temperature": raw.get("temperature", mcd.DEFAULT_TEMPERATURE)})
    elif "steps" in raw or "temperature" in raw:
        raise SplitError(f"{where}.{'steps' if 'steps' in raw else 'temperature'}: only the annealed search "
                         "takes it (search: anneal)")


def _systematicity(raw: Mapping[str, Any], config: dict[str, Any], spec: C.CompoundSpec, where: str,
                   seed: int, lib: OperatorLibrary = STUDY) -> Rule:
    if ("pairs" in raw) == ("share" in raw):
        raise SplitError(f"{where}: give exactly one of 'pairs' (named operator pairs) or 'share' (a random "
                         "share of all pairs)")
    universe = _op_set(raw.get("ops", "all"), f"{where}.ops", lib)
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
        rng = Rng("opgen-split", "systematicity", seed, _canon(list(universe)), str(raw["share"]))
        drawn = rng.sample(everything, n)
        pairs = sorted(drawn, key=lambda p: (position[p[0]], position[p[1]]))
        # the resolved form names the pairs (what a rebuild reads back) and records how they were drawn
        config["drawn"] = {"share": raw["share"], "ops": list(universe), "seed": seed}
    unique = sorted(set(pairs), key=lambda p: (position[p[0]], position[p[1]]))
    config["pairs"] = [list(p) for p in unique]
    config["eval"] = raw.get("eval", "require")
    return Rule("systematicity", config, spec, where, pairs=frozenset(frozenset(p) for p in unique),
                eval_requires=config["eval"] == "require", library=lib)


def rule_from_config(config: Mapping[str, Any], lib: OperatorLibrary = STUDY) -> Rule:
    """A rule from its resolved config (as a manifest or a pool option holds it), over ``lib``."""
    rule = resolve(dict(config), "split", 0, lib)
    assert rule is not None
    return rule
