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

from opgen import expr as E
from opgen import ops
from opgen.generate import (
    DEPTH_PLAN_SCHEMA,
    LENGTH_RANGE,
    OP_SET,
    DepthPlan,
    Generator,
    check_range,
    sample_params,
    text,
)
from opgen.rng import LOWERCASE, Rng
from opgen.tasks import Item, Task

_P = {"type": "number", "minimum": 0, "maximum": 1}


class Trees(Generator):
    NAME = "trees"
    VERSION = 1
    DEFAULTS = {
        "ops": "train", "depths": [1], "per_depth": None, "rows": None,
        "p_binary": 0.2, "p_concat": 0.5, "p_method": 0.02, "p_parameterised": 0.5, "p_leaf_x": 0.5,
        "literal_len": [3, 6], "input_len": [3, 10], "alphabet": LOWERCASE,
        "methods": list(ops.NATIVE_METHODS), "interlace_ops": "auto",
        "require_x": True, "require_call": True, "max_output_chars": 1000,
    }
    OPTIONS_SCHEMA = {"properties": {
        "ops": OP_SET, **DEPTH_PLAN_SCHEMA,
        "p_binary": _P, "p_concat": _P, "p_method": _P, "p_parameterised": _P, "p_leaf_x": _P,
        "literal_len": LENGTH_RANGE, "input_len": LENGTH_RANGE,
        "alphabet": {"type": "string", "minLength": 1},
        "methods": {"type": "array", "items": {"enum": list(ops.METHODS)}},
        "interlace_ops": {"oneOf": [{"const": "auto"}, {"type": "array", "items": {"type": "string"}}]},
        "require_x": {"type": "boolean"}, "require_call": {"type": "boolean"},
        "max_output_chars": {"type": "integer", "minimum": 1},
    }}

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        o = self.options
        self.plan = DepthPlan(self)
        self.op_ids = self.op_set(o["ops"], "ops")
        members = [ops.get(op_id) for op_id in self.op_ids]
        self.plain = [op for op in members if op.n_inputs == 1 and not op.params]
        self.param = [op for op in members if op.n_inputs == 1 and op.params]
        if o["interlace_ops"] == "auto":
            self.interlace = [op for op in members if op.n_inputs == 2]
        else:
            chosen = self.op_set(o["interlace_ops"], "interlace_ops")
            self.interlace = [ops.get(op_id) for op_id in chosen]
            if any(op.n_inputs != 2 for op in self.interlace):
                raise self.fail("interlace_ops", "every interlace operator must take two string inputs")
        if not self.plain and not self.param:
            raise self.fail("ops", "the set has no unary operator to build levels from")
        self.lit_lo, self.lit_hi = check_range(self, "literal_len")
        self.in_lo, self.in_hi = check_range(self, "input_len")
        self.methods = tuple(o["methods"])
        if o["p_method"] > 0 and not self.methods:
            raise self.fail("methods", "p_method > 0 needs at least one method")
        self.max_len = o["max_output_chars"]
        self.alphabet = o["alphabet"]
        self.require_x, self.require_call = o["require_x"], o["require_call"]
        self.t_leaf_x, self.t_binary, self.t_concat, self.t_method, self.t_param = (
            _threshold(o[k]) for k in ("p_leaf_x", "p_binary", "p_concat", "p_method", "p_parameterised"))

    def count(self) -> int:
        return self.plan.total

    def _node(self, rng: Rng, d: int, flags: list[bool]) -> E.Expr:
        # Coin flips compare a word's top 53 bits with p * 2**53: exactly ``rng.chance(p)``,
        # without two method calls per flip (generation is most of a build's time).
        word = rng.word
        if d == 0:
            if (word() >> 11) < self.t_leaf_x:
                flags[0] = True
                return _X
            return E.Lit(text(rng, self.lit_lo, self.lit_hi, self.alphabet))
        if (word() >> 11) < self.t_binary:
            if not self.interlace or (word() >> 11) < self.t_concat:
                return E.Concat(self._node(rng, d - 1, flags), self._node(rng, d - 1, flags))
            op = self.interlace[rng.below(len(self.interlace))] if len(self.interlace) > 1 else self.interlace[0]
            flags[1] = True
            left = self._node(rng, d - 1, flags)
            return E.Call(op.id, (left, self._node(rng, d - 1, flags)), ())
        if self.methods and (word() >> 11) < self.t_method:
            return E.Method(self._node(rng, d - 1, flags), self.methods[rng.below(len(self.methods))])
        if self.plain and self.param:
            pool = self.param if (word() >> 11) < self.t_param else self.plain
        else:
            pool = self.plain or self.param
        op = pool[rng.below(len(pool))]
        flags[1] = True
        inner = self._node(rng, d - 1, flags)
        return E.Call(op.id, (inner,), sample_params(op, rng) if op.params else ())

    def candidate(self, i: int, j: int) -> Item | None:
        rng = self.rng(i, j)
        flags = [False, False]  # uses x, calls an operator of the set
        program = self._node(rng, self.plan.depth(i), flags)
        if self.require_x and not flags[0]:
            self.rejections["no_x"] += 1
            return None
        if self.require_call and not flags[1]:
            self.rejections["no_operator_call"] += 1
            return None
        # The input is drawn after the program, so a rejected program costs no input draw.
        x = text(rng, self.in_lo, self.in_hi, self.alphabet)
        try:
            out = E.evaluate(program, x, self.max_len)
        except E.OutputTooLong:
            self.rejections["output_too_long"] += 1
            return None
        return Item((Task(program, x, out),))


_X = E.Var()


def _threshold(p: float) -> float:
    return p * 9007199254740992.0  # 2**53: uniform() < p  <=>  (word >> 11) < p * 2**53


GENERATORS = {"trees": Trees}
