"""Mixed-structure expression trees of exact depth (the native benchmark's generator, corrected).

Every root-to-leaf path has exactly ``d`` levels. At each level: a binary node with ``p_binary``
(concatenation ``(a + b)`` with ``p_concat``, else an interlace operator), else a unary node: a
builtin method with ``p_method``, else an operator of the set (parameterless vs parameterised with
``p_parameterised``). Leaves are ``x`` with ``p_leaf_x``, else a lowercase literal.

Where opgen's defaults differ from the native generator (docs/recipes.md explains each):
``require_x`` (77% of native stage-1 programs ignored ``x``), ``require_call`` (1.8% of native
held-out test programs had no held-out operator), ``interlace_ops: auto`` picks uniformly among the
set's interlace operators (native took func_7 whenever present, so func_20 never appeared in
stage 1), and ``max_output_chars`` rejects explosive programs (native outputs reached 17,856).
"""

from __future__ import annotations

import math
from bisect import bisect_right

from opgen import expr, ops
from opgen.generate import (
    DEPTH_PLAN_SCHEMA,
    INPUT_OPTIONS,
    LENGTH_RANGE,
    OP_SET,
    DepthPlan,
    InputGenerator,
    Unsatisfiable,
    check_range,
    effect_ok,
    register_generator,
    sample_params,
    text_drawer,
    text_vectorizer,
)
from opgen.rng import LOWERCASE, CounterRng, Rng, counter_blocks, counter_key, input_side
from opgen.tasks import Item, Task, with_unchanged

_P = {"type": "number", "minimum": 0, "maximum": 1}

# A tree's nodes are drawn before anything is checked against max_output_chars; past this many the
# draw stops with Unsatisfiable (option max_nodes, read with .get: recipes without it keep their digests).
# The bundled recipes draw at most a few hundred (benchmarks/NOTES.md, 2026-12-03: every bundled recipe measured).
MAX_NODES = 1_000_000
MAX_NODES_OPTION = {"type": "integer", "minimum": 1, "description": "stop (Unsatisfiable) when a candidate "
                    "tree grows past this many nodes while it is drawn; a depth whose trees average more is "
                    "refused up front"}


class _TooLarge(Exception):
    """A shape past ``max_nodes`` (caught in ``_candidates``, raised there as Unsatisfiable)."""


def expected_nodes(p_binary: float, d: int) -> float:
    """The mean number of nodes of a depth-``d`` tree: each level's nodes have 1 + p_binary children
    on average, so level k holds (1 + p_binary)^k of them (inf past what a float holds)."""
    if p_binary <= 0:
        return float(d + 1)
    exponent = (d + 1) * math.log1p(p_binary)
    return math.inf if exponent > 700 else math.expm1(exponent) / p_binary


class Trees(InputGenerator):
    NAME = "trees"
    # 2: a unary call's operator and integer/choice parameters in one draw; 3: counter streams
    # (opgen.rng.CounterRng), drawn for a chunk of rows at once; 4: inputs on the role's side
    # (opgen.rng.input_side: an eval task never equals a training one)
    VERSION = 4
    DEFAULTS = {  # INPUT_DEFAULTS among the others: the order of the resolved options in a build's card
        "ops": "train", "depths": [1], "per_depth": None, "rows": None,
        "p_binary": 0.2, "p_concat": 0.5, "p_method": 0.02, "p_parameterised": 0.5, "p_leaf_x": 0.5,
        "literal_len": [3, 6], "input_len": [3, 10], "alphabet": LOWERCASE,
        "methods": list(ops.NATIVE_METHODS), "interlace_ops": "auto",
        "require_x": True, "require_call": True, "max_output_chars": 1000,
    }
    OPTIONS_SCHEMA = {"properties": {
        "ops": OP_SET, **DEPTH_PLAN_SCHEMA,
        "p_binary": _P, "p_concat": _P, "p_method": _P, "p_parameterised": _P, "p_leaf_x": _P,
        "literal_len": LENGTH_RANGE, **INPUT_OPTIONS,
        "methods": {"type": "array", "items": {"enum": list(ops.METHODS)}},
        "interlace_ops": {"oneOf": [{"const": "auto"}, {"type": "array", "items": {"type": "string"}}]},
        "require_x": {"type": "boolean"}, "require_call": {"type": "boolean"}, "max_nodes": MAX_NODES_OPTION,
    }}

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        o = self.options
        self._same = 0  # calls that returned their argument unchanged in the tree _detail is drawing
        self.plan = DepthPlan(self)
        self.op_ids = self.op_set(o["ops"], "ops")
        members = [self.ctx.library.get(op_id) for op_id in self.op_ids]
        self.plain = [op for op in members if op.n_inputs == 1 and not op.params]
        self.param = [op for op in members if op.n_inputs == 1 and op.params]
        if o["interlace_ops"] == "auto":
            self.interlace = [op for op in members if op.n_inputs == 2]
        else:
            chosen = self.op_set(o["interlace_ops"], "interlace_ops")
            self.interlace = [self.ctx.library.get(op_id) for op_id in chosen]
            if any(op.n_inputs != 2 for op in self.interlace):
                raise self.fail("interlace_ops", "every interlace operator must take two string inputs")
        if not self.plain and not self.param:
            raise self.fail("ops", "the set has no unary operator to build levels from")
        self.lit_lo, self.lit_hi = check_range(self, "literal_len")
        self._input = self.input_drawer()
        self.max_nodes = o.get("max_nodes", MAX_NODES)
        self._check_sizes()
        self.methods = tuple(o["methods"])
        if o["p_method"] > 0 and not self.methods:
            raise self.fail("methods", "p_method > 0 needs at least one method")
        self.alphabet = o["alphabet"]
        self.require_x, self.require_call = o["require_x"], o["require_call"]
        self._call_table(o["p_parameterised"])
        self._shape_tables(o)
        self._inputs = text_vectorizer(self.in_lo, self.in_hi, self.alphabet)
        self._literal = text_drawer(self.lit_lo, self.lit_hi, self.alphabet)
        # Candidate j of row i draws from CounterRng(key, i, j): SplitMix64 over a key of the
        # recipe digest and split, so a chunk of rows can draw its first words with numpy.
        self._key = counter_key(ctx.digest, ctx.split)
        self._require_effect = bool(o.get("require_effect", False))

    def count(self) -> int:
        return self.plan.total

    def row_context(self, i: int) -> str:
        return self.plan.context(i)

    def _check_sizes(self) -> None:
        """Up front: a depth whose trees are, on average, past ``max_nodes`` is refused, naming the
        deepest depth that is not (a search there would stop at the bound on its first rows anyway)."""
        pb = self.options["p_binary"]
        too_deep = sorted(d for d in set(self.plan.depths) if expected_nodes(pb, d) > self.max_nodes)
        if too_deep:
            d = too_deep[0]
            fits = max(k for k in range(d) if expected_nodes(pb, k) <= self.max_nodes)
            raise Unsatisfiable(
                f"{self.ctx.where}.depths: trees of depth {d} with p_binary {pb} have about "
                f"{expected_nodes(pb, d):.3g} nodes on average, past max_nodes ({self.max_nodes:,}), where opgen "
                f"stops drawing a tree; the deepest depth whose trees stay under it is {fits} (or lower p_binary, "
                f"or raise max_nodes)")

    def too_large(self, i: int, d: int) -> Unsatisfiable:
        """A candidate of row ``i`` grew past ``max_nodes`` while its shape was drawn."""
        pb = self.options["p_binary"]
        return Unsatisfiable(
            f"{self.ctx.where or f'split {self.ctx.split!r}'}: row {i}, depth {d}: a candidate tree grew past "
            f"{self.max_nodes:,} nodes while it was drawn (trees of depth {d} with p_binary {pb} have about "
            f"{expected_nodes(pb, d):.3g} nodes on average); opgen stops there rather than draw it: ask for a lower "
            f"depth or p_binary, or raise max_nodes")

    # A candidate is drawn in two passes. The shape (node kinds, leaf kinds) comes first: a subtree of
    # depth <= 2 is one word, read against the cumulative probabilities of every such shape (the
    # native generator's coin flips, multiplied out), and deeper levels one word per node. So a
    # candidate that cannot meet ``require_x`` / ``require_call`` (about half of all depth-1
    # candidates) costs one word and is rejected before any operator, parameter, literal or input
    # is drawn. The second pass draws those details in pre-order and evaluates on the way up, so a
    # value over the cap stops the candidate at once and no separate evaluation walks the tree.

    def _shape(self, word, d: int, out: list[int]) -> None:
        if len(out) > self.max_nodes:
            raise _TooLarge
        thresholds, kinds = self._node_kinds
        kind = kinds[bisect_right(thresholds, word() >> 11)]
        out.append(kind)
        for _ in range(2 if kind <= _INTERLACE else 1):
            if d - 1 <= _TABLE_DEPTH:
                thresholds_d, shapes, _ = self._tables[d - 1]
                out.extend(shapes[bisect_right(thresholds_d, word() >> 11)])
            else:
                self._shape(word, d - 1, out)

    def _detail(self, rng: Rng, kinds, x: str) -> tuple[expr.Expr, str]:
        kind = next(kinds)
        max_len = self.max_len
        if kind == _LEAF_X:
            return _X, x
        if kind == _OP:
            # Operator and parameters in one draw (see _call_table); letter parameters after it.
            op, params, on_x = self._calls[bisect_right(self._call_thresholds, rng.word() >> 11)]
            if params is None:
                params = sample_params(op, rng)
                on_x = None
            inner, arg = self._detail(rng, kinds, x)
            node = on_x if on_x is not None and inner is _X else expr.Call(op.id, (inner,), params)
            _precheck(op, node, (arg,), max_len)
            value = op.fn(arg, *params)
            if value == arg:  # measure.unchanged_calls, counted on the way up (tested equal)
                self._same += 1
        elif kind == _LEAF_LIT:
            value = self._literal(rng)
            node = expr.Lit(value)
        elif kind == _CONCAT:
            left, lv = self._detail(rng, kinds, x)
            right, rv = self._detail(rng, kinds, x)
            node, value = expr.Concat(left, right), lv + rv
        elif kind == _INTERLACE:
            op = self.interlace[rng.below(len(self.interlace))] if len(self.interlace) > 1 else self.interlace[0]
            left, lv = self._detail(rng, kinds, x)
            right, rv = self._detail(rng, kinds, x)
            node, value = expr.Call(op.id, (left, right), ()), op.fn(lv, rv)
            if value == lv:
                self._same += 1
        else:
            name = self.methods[rng.below(len(self.methods))]
            inner, value = self._detail(rng, kinds, x)
            node, value = expr.Method(inner, name), getattr(value, name)()
        if len(value) > max_len:
            raise expr.OutputTooLong(len(value), max_len)
        return node, value

    def candidate(self, i: int, j: int) -> Item | None:
        for _, found in self._candidates(i, j, j + 1):
            return found
        return None

    def _effective(self, found: Item | None) -> Item | None:
        return effect_ok(self, found) if self._require_effect else found

    def rng(self, i: int, j: int) -> CounterRng:
        """The stream of candidate ``j`` of row ``i``."""
        return CounterRng(self._key, i, j)

    def first_valid(self, i: int, start: int = 0) -> tuple[int, Item]:
        return self._first_in(i, start, start + self.max_attempts)

    def _first_in(self, i: int, start: int, stop: int) -> tuple[int, Item]:
        for j, found in self._candidates(i, start, stop):
            if found is not None:
                return j, found
        raise self.no_candidate(i, start)

    def _candidates(self, i: int, start: int, stop: int):
        """``(j, candidate j of row i or None)`` for j in [start, stop); a rejected shape yields nothing."""
        key = self._key
        d = self.plan.depth(i)
        rejections = self.rejections
        if d <= _TABLE_DEPTH:
            thresholds, shapes, verdicts = self._tables[d]
            for j in range(start, stop):
                rng = CounterRng(key, i, j)
                k = bisect_right(thresholds, rng.word() >> 11)
                if verdicts[k]:  # decided by the first word
                    rejections[verdicts[k]] += 1
                    continue
                kinds = shapes[k]
                if kinds == _CALL_ON_X:  # the commonest accepted shape: its details without the walk
                    yield j, self._effective(self._call_on_x(rng))
                else:
                    yield j, self._effective(self._details(rng, kinds))
        else:
            for j in range(start, stop):
                rng = CounterRng(key, i, j)
                kinds = []
                try:
                    self._shape(rng.word, d, kinds)
                except _TooLarge:
                    raise self.too_large(i, d) from None
                verdict = self._verdict(kinds)
                if verdict:
                    rejections[verdict] += 1
                    continue
                yield j, self._effective(self._details(rng, kinds))

    def first_valid_many(self, start: int, stop: int) -> list[tuple[int, Item]]:
        """``[first_valid(i) for i in range(start, stop)]``, the same draws, made in bulk.

        Rows of a tabled depth draw their candidates' first eight words with numpy and judge
        their shapes together (rejected ones move on to the next candidate together); a call on
        ``x`` also takes its input and its operator from those words at once. Anything else (a
        shape with more nodes, letter parameters, a rare input redraw, an output over the cap)
        continues that row's own stream exactly as ``first_valid`` does.
        """
        if self._require_effect:  # judged per candidate: the rows' own streams, one by one
            return [self.first_valid(i) for i in range(start, stop)]
        import numpy as np

        out: list = [None] * (stop - start)
        by_depth: dict[int, list[int]] = {}
        for i in range(start, stop):
            by_depth.setdefault(self.plan.depth(i), []).append(i)
        for d, rows in sorted(by_depth.items()):
            if d > _TABLE_DEPTH:
                for i in rows:
                    out[i - start] = self.first_valid(i)
                continue
            idx = np.array(rows, dtype=np.int64)
            j, seeds, words, k = self._accepted_shapes(idx, d, np)
            self._details_many(idx, j, seeds, words, k, d, out, start, np)
        return out

    def _accepted_shapes(self, idx, d: int, np):
        """Per row, the first candidate whose shape passes the verdicts: (j, seeds, words, shape)."""
        th, codes, names, _ = self._bulk_tables(np)[2][d]
        j = np.zeros(len(idx), dtype=np.int64)
        seeds, words = counter_blocks(self._key, idx, j)
        k = np.searchsorted(th, (words[:, 0] >> np.uint64(11)).astype(np.float64), side="right")
        pending = np.flatnonzero(codes[k])
        while pending.size:
            for code, n in enumerate(np.bincount(codes[k[pending]]).tolist()):
                if code and n:
                    self.rejections[names[code - 1]] += n
            j[pending] += 1
            if int(j[pending].max()) >= self.max_attempts:
                raise self.no_candidate(int(idx[pending[j[pending] >= self.max_attempts][0]]))
            s2, w2 = counter_blocks(self._key, idx[pending], j[pending])
            seeds[pending], words[pending] = s2, w2
            k[pending] = np.searchsorted(th, (w2[:, 0] >> np.uint64(11)).astype(np.float64), side="right")
            pending = pending[codes[k[pending]] != 0]
        return j, seeds, words, k

    def _bulk_tables(self, np) -> tuple:
        """The tables as numpy arrays, made on first use: per call entry (op, params, node, whether
        the growth guard applies) and the entries' thresholds; per tabled depth the shape
        thresholds, each shape's verdict code (0: accepted), the verdict names, a call on x?"""
        bulk = self.__dict__.get("_bulk")
        if bulk is None:
            depths = {}
            for d, (thresholds, shapes, verdicts) in enumerate(self._tables):
                names = sorted({v for v in verdicts if v})
                codes = np.array([0 if not v else 1 + names.index(v) for v in verdicts], dtype=np.int64)
                on_x = np.array([kinds == _CALL_ON_X for kinds in shapes], dtype=bool)
                depths[d] = (np.array(thresholds, dtype=np.float64), codes, names, on_x)
            bulk = self._bulk = ([(op, params, node, op.out_len is not None) for op, params, node in self._calls],
                                 np.array(self._call_thresholds, dtype=np.float64), depths)
        return bulk

    def _details_many(self, idx, j, seeds, words, k, d: int, out: list, start: int, np) -> None:
        shapes = self._tables[d][1]
        calls, call_thresholds, depths = self._bulk_tables(np)
        n = len(idx)
        # Inputs come first in every candidate's details (word 1); a call on x then picks its
        # operator with word 2. A word the input drawer would reject, or an input of the other
        # side, sends the row one by one.
        texts = self._inputs(words[:, 1]) if self._inputs is not None else None
        flat, begins, lengths, ok = texts if texts is not None else ("", [0] * n, [0] * n, [False] * n)
        # An input of the other side (half the rows) is drawn again from word 2, and the call's
        # operator then comes from word 3: both read here too, so such rows stay in bulk.
        texts2 = self._inputs(words[:, 2]) if self._inputs is not None else None
        flat2, begins2, lengths2, ok2 = texts2 if texts2 is not None else ("", [0] * n, [0] * n, [False] * n)
        picks_at = [np.searchsorted(call_thresholds, (words[:, c] >> np.uint64(11)).astype(np.float64),
                                    side="right").tolist() for c in (2, 3)]
        max_len, precheck, rejections = self.max_len, _precheck, self.rejections
        check_input = self.in_hi > max_len
        on_x = depths[d][3][k].tolist()
        side = self.side
        for r, (i, jj, shape, seed, first) in enumerate(zip(idx.tolist(), j.tolist(), k.tolist(), seeds.tolist(),
                                                            words.tolist())):
            found = None
            x = flat[begins[r]:begins[r] + lengths[r]] if ok[r] else ""
            at = 0  # input redraws before x (the words after the input move on by as many)
            good = bool(ok[r]) and input_side(x) == side
            if ok[r] and not good and ok2[r]:
                x2 = flat2[begins2[r]:begins2[r] + lengths2[r]]
                if input_side(x2) == side:
                    x, at, good = x2, 1, True
                    rejections["input_side"] += 1
            if not good:  # the row's own stream, from its input on (it counts its own redraws)
                rng = CounterRng.resume(seed, tuple(first), 1)
                found = self._call_on_x(rng) if on_x[r] else self._details(rng, shapes[shape])
            else:
                try:
                    if check_input and len(x) > max_len:
                        raise expr.OutputTooLong(len(x), max_len)
                    if on_x[r]:
                        op, params, node, guarded = calls[picks_at[at][r]]
                        if params is None:
                            params = sample_params(op, CounterRng.resume(seed, tuple(first), 3 + at))
                            node = expr.Call(op.id, (_X,), params)
                        if guarded:
                            precheck(op, node, (x,), max_len)
                        value = op.fn(x, *params)
                        if len(value) > max_len:
                            raise expr.OutputTooLong(len(value), max_len)
                        found = Item((with_unchanged(Task(node, x, value), int(value == x)),))
                    else:
                        self._same = 0
                        program, value = self._detail(CounterRng.resume(seed, tuple(first), 2 + at),
                                                      iter(shapes[shape]), x)
                        found = Item((with_unchanged(Task(program, x, value), self._same),))
                except expr.OutputTooLong:
                    rejections["output_too_long"] += 1
            out[i - start] = (jj, found) if found is not None else self._first_in(i, jj + 1, self.max_attempts)

    def _details(self, rng: Rng, kinds) -> Item | None:
        x = self._input(rng)
        if x is None:
            return None
        try:
            if len(x) > self.max_len:
                raise expr.OutputTooLong(len(x), self.max_len)
            self._same = 0
            program, out = self._detail(rng, iter(kinds), x)
        except expr.OutputTooLong:
            self.rejections["output_too_long"] += 1
            return None
        return Item((with_unchanged(Task(program, x, out), self._same),))

    def _call_on_x(self, rng: Rng) -> Item | None:
        """``_details`` of the shape (operator call, x): the same draws in the same order."""
        x = self._input(rng)
        if x is None:
            return None
        max_len = self.max_len
        op, params, node = self._calls[bisect_right(self._call_thresholds, rng.word() >> 11)]
        if params is None:
            params = sample_params(op, rng)
            node = expr.Call(op.id, (_X,), params)
        try:
            value = expr.call_capped(node, op.fn, (x,), max_len, op)
        except expr.OutputTooLong:
            self.rejections["output_too_long"] += 1
            return None
        return Item((with_unchanged(Task(node, x, value), int(value == x)),))

    def _call_table(self, p_parameterised: float) -> None:
        """One word picks a unary call: its operator and every integer/choice parameter at once.

        The same distribution as the native draws one after another (parameterised vs
        parameterless with ``p_parameterised`` when the set has both, an operator uniform in its
        group, each parameter uniform in its range), multiplied out into cumulative thresholds. An
        operator with a letters parameter is one entry whose parameters are drawn after it. A call
        on ``x`` itself is built once per entry and shared (trees are immutable).
        """
        groups = [(self.param, p_parameterised), (self.plain, 1 - p_parameterised)]
        if not (self.plain and self.param):
            groups = [(self.plain or self.param, 1.0)]
        entries: list[tuple[tuple, float]] = []
        for members, p_group in groups:
            for op in members:
                p_op = p_group / len(members)
                if any(p.kind not in ("int", "choice") for p in op.params):
                    entries.append(((op, None, None), p_op))
                    continue
                combos: list[tuple] = [()]
                for p in op.params:
                    values = list(range(p.lo, p.hi + 1)) if p.kind == "int" else list(p.choices)
                    combos = [c + (v,) for c in combos for v in values]
                for params in combos:
                    entries.append(((op, params, expr.Call(op.id, (_X,), params)), p_op / len(combos)))
        self._call_thresholds, self._calls = _cumulative(entries)

    def _verdict(self, kinds) -> str:
        if self.require_x and _LEAF_X not in kinds:
            return "no_x"
        if self.require_call and _OP not in kinds and _INTERLACE not in kinds:
            return "no_operator_call"
        return ""

    def _shape_tables(self, o) -> None:
        pc = o["p_concat"] if self.interlace else 1.0
        pm = o["p_method"] if self.methods else 0.0
        pb, px = o["p_binary"], o["p_leaf_x"]
        node = ((_CONCAT, pb * pc), (_INTERLACE, pb * (1 - pc)), (_METHOD, (1 - pb) * pm), (_OP, (1 - pb) * (1 - pm)))
        self._node_kinds = _cumulative([(kind, p) for kind, p in node])
        levels: list[list[tuple[tuple[int, ...], float]]] = [[((_LEAF_X,), px), ((_LEAF_LIT,), 1 - px)]]
        for _ in range(_TABLE_DEPTH):
            below = levels[-1]
            shapes: list[tuple[tuple[int, ...], float]] = []
            for kind, p in node:
                if kind <= _INTERLACE:
                    shapes += [((kind, *a, *b), p * qa * qb) for a, qa in below for b, qb in below]
                else:
                    shapes += [((kind, *a), p * qa) for a, qa in below]
            levels.append(shapes)
        self._tables = []
        for shapes in levels:
            thresholds, kinds = _cumulative(shapes)
            self._tables.append((thresholds, kinds, [self._verdict(k) for k in kinds]))


def _cumulative(weighted: list) -> tuple[list[float], list]:
    """Thresholds on a word's top 53 bits that pick each outcome with its probability (zero ones never)."""
    weighted = [(v, p) for v, p in weighted if p > 0]
    total = sum(p for _, p in weighted)
    thresholds, acc = [], 0.0
    for _, p in weighted[:-1]:
        acc += p
        thresholds.append(acc / total * 9007199254740992.0)  # 2**53
    return thresholds, [v for v, _ in weighted]


_X = expr.Var()
# Binary kinds first: ``kind <= _INTERLACE`` means two children.
_CONCAT, _INTERLACE, _METHOD, _OP, _LEAF_X, _LEAF_LIT = range(6)
_CALL_ON_X = (_OP, _LEAF_X)
_TABLE_DEPTH = 2  # 312 shapes of depth 2 with the default options; depth 3 would have ~10^5
# The evaluator's guard against calls that would build a huge string (func_1 with a large n),
# applied before the call as ``expr.evaluate`` does.
_precheck = expr.precheck_op



register_generator(Trees)
