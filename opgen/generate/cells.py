"""The study's training cells: a shared atomic pool, co-occurrence groups, matched streams, RL pools.

Every SFT cell of the study trains on the *same* 10,000 atomic tasks and differs only in how those
are packed and which composition rows are added. So pools here are keyed by their own name, their
options and the build seed — never by the recipe that uses them: two recipes naming the same pool
get the same tasks, task for task, and changing one cell's packing cannot change its tasks.

A pool is a deterministic sequence; a count takes a prefix of it, so a smaller cell (``sft-c4b``'s
12,436 compositions) is a subset of a larger one over the same pool (``sft-v1``'s 15,979).

Generators (recipe ``generator:`` names): ``sft_cell`` (atomic pool, single or grouped, plus an
optional composition pool, rows shuffled together), ``matched_stream`` (one stream of the matched
pair, step by step), ``rl_pool`` (r1: chains + multi-task atomic prompts; mda: chains + deep chain
followed by long-literal atomic tasks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from opgen import expr, pack
from opgen.generate import OP_SET, Context, Generator, GeneratorError, register_generator, sample_params, side_text
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import SIDES, Rng
from opgen.tasks import Item, Task

# As the atomic and trees generators draw them: inputs of 3-10 lowercase letters, an interlace
# operator's second input a 3-6 letter literal, outputs capped at 1,000 characters.
INPUT_LEN = (3, 10)
LITERAL_LEN = (3, 6)
MAX_OUTPUT = 1000
# Candidate draws per pool slot before the sampler gives up with a clear error.
MAX_ATTEMPTS = 200


class CellError(GeneratorError):
    """A cell option that cannot be met (unknown operator set, impossible count, bad width)."""


# ---------------------------------------------------------------- sampling primitives


def atomic_task(op_id: str, rng: Rng, first: expr.Expr | None = None, *, side: int,
                lib: OperatorLibrary = STUDY) -> Task:
    """One operator of ``lib`` applied to ``x`` (an interlace operator's second input: a short
    literal), or with ``first`` as its first input (probe 1g, the mixed-depth RL pool's long
    literals); ``x`` is drawn on ``side`` (opgen.rng.input_side)."""
    op = lib.get(op_id)
    x = side_text(rng, *INPUT_LEN, side)
    args: tuple[expr.Expr, ...] = (expr.Var(),)
    if op.n_inputs == 2:
        args += (expr.Lit(rng.text(*LITERAL_LEN)),)
    if first is not None:
        args = (first,) + ((expr.Var(),) if op.n_inputs == 2 else ())
    program = expr.Call(op.id, args, sample_params(op, rng))
    with expr.recursion_headroom():
        # one call on at most a few hundred characters: no operator can pass the cap
        return Task(program, x, expr.evaluate(program, x, lib=lib))


def unary(op_ids: Sequence[str], lib: OperatorLibrary = STUDY) -> tuple[str, ...]:
    """Operators of ``lib`` that can stand in a pure nesting chain (one string input)."""
    return tuple(o for o in op_ids if lib.get(o).n_inputs == 1)


def grow_chain(op_ids: Sequence[str], depth: int, rng: Rng, *, side: int, fixed: Mapping[int, str] | None = None,
               max_len: int = MAX_OUTPUT, no_repeat: bool = True,
               lib: OperatorLibrary = STUDY) -> Task | None:
    """A pure nesting chain ``f1(f2(...fd(x)))`` of exactly ``depth`` calls, grown from the inside out
    and evaluated as it grows, so each level picks among operators that keep every value within
    ``max_len``: rejecting whole chains would almost never accept a depth-20 chain over operators
    that double or triple their input. ``fixed`` pins operators at levels (0 = outermost); ``x`` is
    drawn on ``side``. None when a level has no operator left that fits."""
    fixed = dict(fixed or {})
    pool = [o for o in unary(op_ids, lib) if o not in fixed.values()]
    evaluate_lib = lib
    x = side_text(rng, *INPUT_LEN, side)
    value = x
    node: expr.Expr = expr.Var()
    inner = ""
    with expr.recursion_headroom():
        for level in range(depth - 1, -1, -1):
            left = [fixed[level]] if level in fixed else [o for o in pool if not (no_repeat and o == inner)]
            while left:
                # uniform among the operators not yet found too long at this level
                op = lib.get(left.pop(rng.below(len(left))))
                params = sample_params(op, rng)
                try:
                    out = expr.evaluate(expr.Call(op.id, (expr.Var(),), params), value, max_len, evaluate_lib)
                except expr.OutputTooLong:
                    continue
                node, value, inner = expr.Call(op.id, (node,), params), out, op.id
                break
            else:
                return None
    return Task(node, x, value)


# ---------------------------------------------------------------- pools


def _canon(options: Mapping[str, Any]) -> str:
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


def resolve_ops(spec: Any, where: str, lib: OperatorLibrary = STUDY) -> tuple[str, ...]:
    try:
        return lib.resolve_set(spec)
    except (ValueError, KeyError) as exc:
        raise CellError(f"{where}: {exc}") from None


@lru_cache(maxsize=16)
def _atomic_pool(name: str, per_op: int, op_ids: tuple[str, ...], seed: int, side: int,
                 lib: OperatorLibrary = STUDY) -> tuple[Task, ...]:
    # the side names the stream only off the training side: training pools keep their keys; so does
    # the library, named only when it is not the study's (the study's pools keep theirs)
    rng = Rng("opgen-pool", "atomic", name, per_op, ",".join(op_ids), seed, *(("side", side) if side else ()),
              *(() if lib.is_study else ("library", lib.digest)))
    out: list[Task] = []
    seen: set[str] = set()
    for op_id in op_ids:
        for i in range(per_op):
            for j in range(MAX_ATTEMPTS):
                task = atomic_task(op_id, rng.derive(op_id, i, j), side=side, lib=lib)
                if task.identity() not in seen:
                    seen.add(task.identity())
                    out.append(task)
                    break
            else:
                raise CellError(f"atomic pool {name!r}: {op_id} has fewer than {per_op} distinct tasks")
    return tuple(out)


def atomic_pool(name: str = "sft-atomic", per_op: int = 400, op_set: Any = "all", seed: int = 1,
                role: str = "train", lib: OperatorLibrary = STUDY) -> tuple[Task, ...]:
    """``per_op`` distinct atomic tasks per operator of ``lib``, operators in library order, keyed by
    (name, per_op, operators, seed), the side of ``role`` only (an eval split naming a training
    pool's name gets that pool drawn on the eval side: never the training tasks) and the library's
    digest when it is not the study's."""
    if per_op < 1:
        raise CellError(f"atomic pool {name!r}: per_op must be >= 1, got {per_op}")
    return _atomic_pool(name, per_op, resolve_ops(op_set, f"atomic pool {name!r}: ops", lib), seed, SIDES[role],
                        lib)


class _CompPool:
    """A composition pool grown on demand: slot i depends only on slots before it, so every count
    is served as a prefix of one sequence (and the cells asking 12,436 and 15,979 share the work)."""

    def __init__(self, name: str, trees_json: str, seed: int, unique: str = "program", role: str = "train",
                 split_json: str = "", lib: OperatorLibrary = STUDY):
        # The trees generator draws row i's candidates from CounterRng(counter_key(ctx.digest,
        # ctx.split), i, j): naming the pool (not the recipe) in its context is what makes the
        # pool shared between cells. Imported here: trees registers itself, the registry then loads every
        # bundled generator, and probes reads this module's constants while it is half made.
        from opgen.generate.trees import Trees  # habits: keep (import order)

        self.name = name
        opts = Trees.resolve({**json.loads(trees_json), "rows": 1})
        ctx = Context(digest=f"opgen-pool:comp:{name}:{trees_json}" + (f":{role}" if role != "train" else "")
                      + ("" if lib.is_study else f":library:{lib.digest}"),
                      split=name, seed=seed, role=role, library=lib,
                      op_sets={"train": lib.train_ids, "heldout": lib.heldout_ids, "all": lib.ids})
        self.gen = Trees(opts, ctx)
        self.tasks: list[Task] = []
        self.seen: set[str] = set()
        # program: no two compositions share their program (the native generator's rule: a
        # composition demo is a program, whatever its input); task: program and input
        self.key = (lambda t: t.expr_text) if unique == "program" else (lambda t: t.identity())
        self.admit = None
        if split_json:
            from opgen.splits.kinds import rule_from_config

            self.admit = rule_from_config(json.loads(split_json), lib).admitter("train")

    def take(self, rows: int) -> tuple[Task, ...]:
        gen = self.gen
        for i in range(len(self.tasks), rows):
            for j in range(gen.max_attempts):
                item = gen.candidate(i, j)
                if item is None or (self.admit is not None and not self.admit(item)):
                    continue
                key = self.key(item.tasks[0])
                if key not in self.seen:
                    self.seen.add(key)
                    self.tasks.append(item.tasks[0])
                    break
            else:
                raise CellError(f"composition pool {self.name!r} found no new composition for slot {i} "
                                f"in {gen.max_attempts} candidates")
        return tuple(self.tasks[:rows])


_COMP_POOLS: dict[tuple[str | int, ...], _CompPool] = {}


def comp_pool(name: str, rows: int, trees: Mapping[str, Any], seed: int = 1, where: str = "",
              unique: str = "program", role: str = "train",
              split: Mapping[str, Any] | None = None, lib: OperatorLibrary = STUDY) -> tuple[Task, ...]:
    """The first ``rows`` distinct compositions of a named pool (trees-generator options ``trees``):
    distinct programs (``unique="program"``, the native rule) or distinct (program, input) tasks."""
    trees_json = _canon(trees)
    split_json = _canon(split) if split else ""
    key: tuple[str | int, ...] = (name, trees_json, seed, unique, role) + ((split_json,) if split_json else ()) \
        + (() if lib.is_study else (lib.digest,))
    if key not in _COMP_POOLS:
        from opgen.generate.trees import Trees  # habits: keep (import order: see _CompPool)

        # checked here so that a bad option is named from the recipe that gave it
        Trees.resolve({**trees, "rows": 1}, f"{where}.trees" if where else f"composition pool {name!r}")
        _COMP_POOLS[key] = _CompPool(name, trees_json, seed, unique, role, split_json, lib)
    try:
        return _COMP_POOLS[key].take(rows)
    except CellError as exc:
        raise CellError(f"{where}: {exc}" if where else str(exc)) from None


def mcd_train_tasks(split: Mapping[str, Any], rows: int, seed: int, where: str,
                    lib: OperatorLibrary = STUDY) -> tuple[Task, ...]:
    """The first ``rows`` rows of an mcd search's train side (opgen.splits.mcd), as compositions: a
    cell on an mcd split composes only what the search put on its train side."""
    from opgen.splits import mcd

    try:
        items, sel = mcd.pool_and_selection(split, seed, where.split(": ", 1)[0] + ": " if ": " in where else "", lib)
    except mcd.McdError as exc:
        raise CellError(f"{where}: {exc}") from None
    if rows > len(sel.train):
        raise CellError(f"{where}.rows: {rows} compositions asked, the search's train side has {len(sel.train)}")
    out = []
    for k in sel.train[:rows]:
        tasks = items[k].tasks
        if len(tasks) != 1:
            raise CellError(f"{where}: the mcd pool's rows hold {len(tasks)} tasks; a cell's compositions are "
                            "single-task rows (give split.pool a generator of one task a row: trees, chains)")
        out.append(tasks[0])
    return tuple(out)


# ---------------------------------------------------------------- option fragments

_RANGE = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2}
ATOMIC_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["pool"],
    "properties": {"pool": {"type": "string", "minLength": 1}, "per_op": {"type": "integer", "minimum": 1},
                   "ops": OP_SET},
}
COMPS_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["pool", "rows"],
    "properties": {"pool": {"type": "string", "minLength": 1}, "rows": {"type": "integer", "minimum": 1},
                   "ops": OP_SET,
                   "depths": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                   "unique": {"enum": ["program", "task"]},
                   "trees": {"type": "object"},
                   # a compositional split's resolved rule (opgen.splits.kinds): compositions that
                   # break its training side are skipped (set by a recipe's `split:`, docs/splits.md)
                   "split": {"type": "object"}},
}
ATOMIC_DEFAULTS = {"pool": "sft-atomic", "per_op": 400, "ops": "all"}


def _without_split(options: Mapping[str, Any]) -> Mapping[str, Any]:
    """Options as they key a plan: a split rule shapes a pool's contents, not the order of its rows."""
    comps = options.get("compositions")
    if isinstance(comps, Mapping) and "split" in comps:
        return {**options, "compositions": {k: v for k, v in comps.items() if k != "split"}}
    return options


def _range(gen: Generator, key: str, value: Sequence[int]) -> tuple[int, int]:
    lo, hi = value
    if lo > hi:
        raise gen.fail(key, f"range [{lo}, {hi}] is empty (expected [lo, hi] with lo <= hi)")
    return lo, hi


class _PoolUser(Generator):
    """Pool-based rows: planned in the constructor, so a row cannot be redrawn."""

    REDRAWABLE = False
    MANIFEST_KEY = "cell"
    SIDED = True
    ANY_LIBRARY = True  # every operator, pool and chain is drawn from ctx.library

    def _atomic(self, spec: Mapping[str, Any]) -> tuple[Task, ...]:
        spec = {**ATOMIC_DEFAULTS, **spec}
        op_ids = self.op_set(spec["ops"], "atomic.ops")
        return atomic_pool(spec["pool"], spec["per_op"], list(op_ids), self.ctx.seed, self.ctx.role, self.ctx.library)

    def _comps(self, spec: Mapping[str, Any]) -> tuple[Task, ...]:
        split = spec.get("split")
        if isinstance(split, Mapping) and split.get("kind") == "mcd":
            return mcd_train_tasks(split, spec["rows"], self.ctx.seed, f"{self.ctx.where}.compositions",
                                   self.ctx.library)
        trees = {"ops": spec.get("ops", "train"), "depths": spec.get("depths", [2, 3, 4]), **spec.get("trees", {})}
        if "rows" in trees or "per_depth" in trees:
            raise self.fail("compositions.trees", "the pool's size is compositions.pool_rows, not a trees option")
        # Slot i of a pool depends only on the slots before it, so the first n compositions are the
        # same whatever count a cell asks for: a smaller cell is a prefix of a larger one.
        return comp_pool(spec["pool"], spec["rows"], trees, self.ctx.seed, f"{self.ctx.where}.compositions",
                         spec.get("unique", "program"), self.ctx.role, spec.get("split"), self.ctx.library)

    def _plan_rng(self, *parts: object) -> Rng:
        # Plans hang on the options and seed, not on the recipe digest: the same options in another
        # recipe (sft-matched-isolated.yaml vs sft-matched.yaml) plan the same rows.
        return Rng("opgen-plan", self.NAME, _canon(self.plan_options()), self.ctx.seed, *parts)

    def plan_options(self) -> Mapping[str, Any]:
        return _without_split(self.options)

    def candidate(self, i: int, j: int) -> Item | None:
        if not 0 <= i < self.count():
            raise IndexError(i)
        return self.row(i)

    def row(self, i: int) -> Item:  # pragma: no cover - abstract
        raise NotImplementedError


# ---------------------------------------------------------------- SFT cells


class SftCell(_PoolUser):
    """Atomic pool tasks (single rows, or co-occurrence groups of width lo..hi) plus an optional
    composition pool; all rows shuffled together into one training file."""

    NAME = "sft_cell"
    # 2: composition pools dedup by program (was: program and input); 3: inputs on the role's side
    VERSION = 3
    DEFAULTS = {"atomic": dict(ATOMIC_DEFAULTS), "width": [1, 1], "compositions": None}
    OPTIONS_SCHEMA = {"properties": {
        "atomic": {"oneOf": [ATOMIC_SCHEMA, {"type": "null"}]}, "width": _RANGE,
        "compositions": {"oneOf": [COMPS_SCHEMA, {"type": "null"}]},
    }}

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        super().__init__(options, ctx)
        o = self.options
        lo, hi = _range(self, "width", o["width"])
        self.atomic = self._atomic(o["atomic"]) if o["atomic"] is not None else ()
        self.comps = self._comps(o["compositions"]) if o["compositions"] is not None else ()
        if not self.atomic and not self.comps:
            raise self.fail("", "a cell needs atomic tasks, compositions or both")
        if hi == 1:
            groups: list[tuple[int, ...]] = [(i,) for i in range(len(self.atomic))]
        else:
            try:
                # Keyed by the atomic side alone: cells that differ only in their compositions
                # (c1 / eco) pack the very same groups.
                key = Rng("opgen-plan", "groups", _canon({**ATOMIC_DEFAULTS, **o["atomic"]}), lo, hi, self.ctx.seed)
                groups = pack.pack(pack.labels_of(self.atomic), lo, hi, key)
            except pack.PackError as exc:
                raise self.fail("width", str(exc)) from None
        entries: list[pack.Entry] = [("group", g) for g in groups] + [("comp", (c,)) for c in range(len(self.comps))]
        self.entries = self._plan_rng("order").shuffled(entries)

    def count(self) -> int:
        return len(self.entries)

    def row(self, i: int) -> Item:
        kind, idx = self.entries[i]
        if kind == "comp":
            return Item((self.comps[idx[0]],), meta=(("part", "composition"),))
        return Item(tuple(self.atomic[k] for k in idx), meta=(("part", "atomic"),))

    def manifest_section(self, rows: int) -> dict[str, Any]:
        """What the manifest should show of this cell (the whole plan; ``rows`` may be a --limit)."""
        widths: dict[str, int] = {}
        for kind, idx in self.entries[:rows]:
            if kind == "group":
                widths[str(len(idx))] = widths.get(str(len(idx)), 0) + 1
        return {"atomic_pool": pool_summary(self.options["atomic"], self.atomic),
                "compositions": pool_summary(self.options["compositions"], self.comps),
                "group_widths": dict(sorted(widths.items()))}


def pool_summary(spec: Mapping[str, Any] | None, tasks: Sequence[Task]) -> dict[str, Any] | None:
    """A pool's name, size and task multiset hash: equal hashes across cells = the same tasks."""
    if spec is None:
        return None
    programs = len({t.expr_text for t in tasks})
    return {"pool": spec["pool"], "tasks": len(tasks), "sha256": pack.multiset_hash(t.identity() for t in tasks),
            "distinct_programs": programs, "distinct_program_share": round(programs / len(tasks), 6) if tasks else 0.0}


def step_hashes_of(tasks_per_row: Sequence[Sequence[str]], rows_per_step: int) -> list[str]:
    """Per-step task multiset hashes of rows read back from a file (each row: its task identities,
    ``expr + NUL + input``), complete steps only: what a trainer without shuffling consumes."""
    steps = len(tasks_per_row) // rows_per_step
    return [pack.multiset_hash(i for row in tasks_per_row[s * rows_per_step:(s + 1) * rows_per_step] for i in row)
            for s in range(steps)]


def stream_match(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """Compare the per-step hashes of the matched streams among manifest split sections
    (``sections[split]["cell"]`` as written from ``manifest_section``); None without both streams."""
    streams = {sec["cell"]["stream"]: (name, sec["cell"]) for name, sec in sections.items()
               if isinstance(sec.get("cell"), Mapping) and "stream" in sec["cell"]}
    if set(streams) != {"isolated", "grouped"}:
        return None
    (iso_name, iso), (grp_name, grp) = streams["isolated"], streams["grouped"]
    n = min(len(iso["step_hashes"]), len(grp["step_hashes"]))
    mismatched = [s for s in range(n) if iso["step_hashes"][s] != grp["step_hashes"][s]]
    return {"isolated": iso_name, "grouped": grp_name, "steps_compared": n,
            "equal": not mismatched and n > 0, "mismatched_steps": mismatched[:10]}


# Both streams of one build share their plan (it is a pure function of this key).
_PLANS: dict[tuple[str, int], pack.MatchedPlan] = {}


class MatchedStream(_PoolUser):
    """One stream of the matched pair: per step the same atomic tasks (single rows or packed into
    groups) and the same composition rows; both streams plan from the options minus ``stream``."""

    NAME = "matched_stream"
    # 2: composition pools dedup by program (was: program and input); 3: inputs on the role's side
    VERSION = 3
    BUILD_KEY = "matched_streams"

    @classmethod
    def summarize_build(cls, sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
        return stream_match(sections)

    DEFAULTS = {
        "stream": "isolated", "atomic": dict(ATOMIC_DEFAULTS), "compositions": None,
        "steps": 400, "atomic_per_step": 48, "grouped_rows_per_step": 20, "comps_per_step": 76, "width": [2, 4],
    }
    OPTIONS_SCHEMA = {"properties": {
        "stream": {"enum": ["isolated", "grouped"]}, "atomic": ATOMIC_SCHEMA,
        "compositions": {"oneOf": [COMPS_SCHEMA, {"type": "null"}]},
        "steps": {"type": "integer", "minimum": 1}, "atomic_per_step": {"type": "integer", "minimum": 1},
        "grouped_rows_per_step": {"type": "integer", "minimum": 1},
        "comps_per_step": {"type": "integer", "minimum": 0}, "width": _RANGE,
    }}

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        super().__init__(options, ctx)
        o = self.options
        self.stream = o["stream"]
        self.atomic = self._atomic(o["atomic"])
        self.comps = self._comps(o["compositions"]) if o["compositions"] is not None else ()
        if o["comps_per_step"] and not self.comps:
            raise self.fail("compositions", f"comps_per_step is {o['comps_per_step']} but no composition pool is given")
        width = _range(self, "width", o["width"])
        key = (_canon(self.plan_options()), self.ctx.seed)
        if key not in _PLANS:
            try:
                _PLANS[key] = pack.plan_matched(
                    pack.labels_of(self.atomic), len(self.comps), self._plan_rng(),
                    steps=o["steps"], atomic_per_step=o["atomic_per_step"],
                    grouped_rows_per_step=o["grouped_rows_per_step"], comps_per_step=o["comps_per_step"],
                    width=width)
            except pack.PackError as exc:
                raise self.fail("width", str(exc)) from None
        self.plan = _PLANS[key]
        self.entries = self.plan.entries(self.stream)

    def plan_options(self) -> Mapping[str, Any]:
        return _without_split({k: v for k, v in self.options.items() if k != "stream"})

    def count(self) -> int:
        return len(self.entries)

    @property
    def rows_per_step(self) -> int:
        return self.plan.rows_per_step(self.stream)

    def row(self, i: int) -> Item:
        kind, idx = self.entries[i]
        step = i // self.rows_per_step
        meta = (("part", "composition" if kind == "comp" else "atomic"), ("step", step))
        if kind == "comp":
            return Item((self.comps[idx[0]],), meta=meta)
        return Item(tuple(self.atomic[k] for k in idx), meta=meta)

    def step_hashes(self) -> list[str]:
        """Per step, the hash of the task multiset it trains on (equal across the two streams)."""
        out = []
        for s in range(self.plan.steps):
            refs = self.plan.step_tasks(self.stream, s)
            out.append(pack.multiset_hash(
                (self.comps if pool == "comp" else self.atomic)[k].identity() for pool, k in refs))
        return out

    def manifest_section(self, rows: int) -> dict[str, Any]:
        """The stream's plan and its per-step hashes over the complete steps among the first ``rows``."""
        steps = min(rows // self.rows_per_step, self.plan.steps)
        return {"stream": self.stream, "steps": self.plan.steps, "steps_in_file": steps,
                "rows_per_step": self.rows_per_step,
                "atomic_per_step": self.plan.atomic_per_step, "comps_per_step": self.plan.comps_per_step,
                "grouped_rows_per_step": self.plan.grouped_rows_per_step,
                "atomic_pool": pool_summary(self.options["atomic"], self.atomic),
                "compositions": pool_summary(self.options["compositions"], self.comps),
                "step_hashes": self.step_hashes()[:steps]}


# ---------------------------------------------------------------- RL pools


class RlPool(Generator):
    """Rows alternate 1:1 between a train-operator serial chain (depth lo..hi) and a second kind:
    ``r1`` a multi-task atomic prompt (width lo..hi, distinct operators), ``mda`` one deep chain task
    followed by 1-2 atomic tasks whose first argument is a long literal."""

    NAME = "rl_pool"
    VERSION = 2  # 2: inputs on the role's side (opgen.rng.input_side)
    SIDED = True
    ANY_LIBRARY = True
    DEFAULTS = {
        "mix": "r1", "rows": 12800,
        "chain_ops": "train", "chain_depth": [10, 20],
        "atomic_ops": "all", "width": [1, 12],
        "literal_tasks": [1, 2], "literal_len": [8, 200],
    }
    OPTIONS_SCHEMA = {"properties": {
        "mix": {"enum": ["r1", "mda"]}, "rows": {"type": "integer", "minimum": 1},
        "chain_ops": OP_SET, "chain_depth": _RANGE, "atomic_ops": OP_SET, "width": _RANGE,
        "literal_tasks": _RANGE, "literal_len": _RANGE,
    }}

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        super().__init__(options, ctx)
        o = self.options
        self.chain_ops = unary(self.op_set(o["chain_ops"], "chain_ops"), self.ctx.library)
        if len(self.chain_ops) < 2:
            raise self.fail("chain_ops", "chains need at least two unary operators (no operator twice in a row)")
        self.atomic_ops = self.op_set(o["atomic_ops"], "atomic_ops")
        self.depth = _range(self, "chain_depth", o["chain_depth"])
        self.width = _range(self, "width", o["width"])
        if self.width[1] > len(self.atomic_ops):
            raise self.fail("width", f"width up to {self.width[1]} needs as many distinct operators; "
                                     f"atomic_ops has {len(self.atomic_ops)}")
        self.literal_tasks = _range(self, "literal_tasks", o["literal_tasks"])
        self.literal_len = _range(self, "literal_len", o["literal_len"])
        if self.literal_len[1] > MAX_OUTPUT // 2:
            raise self.fail("literal_len", f"literals longer than {MAX_OUTPUT // 2} characters could outgrow the cap")

    def count(self) -> int:
        return self.options["rows"]

    def _chain(self, rng: Rng) -> Task | None:
        task = grow_chain(self.chain_ops, rng.integer(*self.depth), rng, side=self.side, lib=self.ctx.library)
        if task is None:
            self.rejections["chain_stuck"] += 1
        return task

    def candidate(self, i: int, j: int) -> Item | None:
        rng = self.rng(i, j)
        if i % 2 == 1 and self.options["mix"] == "r1":
            picked = rng.sample(list(self.atomic_ops), rng.integer(*self.width))
            tasks = tuple(atomic_task(o, rng.derive("atomic", k), side=self.side, lib=self.ctx.library)
                          for k, o in enumerate(picked))
            return Item(tasks, meta=(("part", "atomic_group"),))
        chain = self._chain(rng.derive("chain"))
        if chain is None:
            return None
        if i % 2 == 0:
            return Item((chain,), meta=(("part", "chain"),))
        picked = rng.sample(list(self.atomic_ops), rng.integer(*self.literal_tasks))
        lits = tuple(atomic_task(o, rng.derive("literal", k), first=expr.Lit(rng.text(*self.literal_len)),
                                 side=self.side, lib=self.ctx.library) for k, o in enumerate(picked))
        return Item((chain,) + lits, meta=(("part", "chain_then_literal"),))


for _cls in (SftCell, MatchedStream, RlPool):
    register_generator(_cls)
