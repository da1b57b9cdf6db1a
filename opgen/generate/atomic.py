"""Atomic tasks: one operator applied to ``x`` with sampled parameters, balanced over a set.

Row ``i`` uses operator ``ops[i % len(ops)]``, so every prefix of the split is balanced too. An
interlace operator's second string input is a literal (an atomic task has one input, ``x``).
"""

from __future__ import annotations

from opgen import expr
from opgen.generate import (
    INPUT_DEFAULTS,
    INPUT_OPTIONS,
    LENGTH_RANGE,
    OP_SET,
    InputGenerator,
    check_range,
    effect_ok,
    register_generator,
    sample_params,
    text,
)
from opgen.tasks import Item, Task


class Atomic(InputGenerator):
    NAME = "atomic"
    VERSION = 2  # 2: inputs on the role's side (opgen.rng.input_side: eval tasks never equal training ones)
    DEFAULTS = {"ops": "all", "per_op": None, "rows": None, "literal_len": [3, 6], **INPUT_DEFAULTS}
    OPTIONS_SCHEMA = {"properties": {
        "ops": OP_SET, "per_op": {"type": ["integer", "null"], "minimum": 1},
        "rows": {"type": ["integer", "null"], "minimum": 1}, "literal_len": LENGTH_RANGE, **INPUT_OPTIONS,
    }}

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        o = self.options
        self.members = [self.ctx.library.get(op_id) for op_id in self.op_set(o["ops"], "ops")]
        if (o["per_op"] is None) == (o["rows"] is None):
            raise self.fail("", "give exactly one of per_op (rows per operator) or rows (total)")
        self.total = o["per_op"] * len(self.members) if o["per_op"] is not None else o["rows"]
        self._input = self.input_drawer()
        self.lit_lo, self.lit_hi = check_range(self, "literal_len")

    def count(self) -> int:
        return self.total

    def candidate(self, i: int, j: int) -> Item | None:
        op = self.members[i % len(self.members)]
        rng = self.rng(i, j)
        alphabet = self.options["alphabet"]
        x = self._input(rng)
        if x is None:
            return None
        args: tuple[expr.Expr, ...] = (expr.Var(),)
        lit: expr.Lit | None = None
        if op.n_inputs == 2:
            lit = expr.Lit(text(rng, self.lit_lo, self.lit_hi, alphabet))
            args += (lit,)
        program = expr.Call(op.id, args, sample_params(op, rng))
        # One operator call on known strings: evaluated here directly, with the evaluator's guards
        # (the size precheck before the call, the cap on every value), not by walking the tree.
        try:
            out = expr.call_capped(program, op.fn, (x,) if lit is None else (x, lit.value), self.max_len, op)
        except expr.OutputTooLong:
            self.rejections["output_too_long"] += 1
            return None
        return effect_ok(self, Item((Task(program, x, out),)))


register_generator(Atomic)
