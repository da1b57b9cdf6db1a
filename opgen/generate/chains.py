"""Pure nesting chains ``f1(f2(…fd(x)))`` over the unary operators of a set."""

from __future__ import annotations

from opgen import expr
from opgen.generate import (
    DEPTH_PLAN_SCHEMA,
    INPUT_DEFAULTS,
    INPUT_OPTIONS,
    OP_SET,
    DepthPlan,
    InputGenerator,
    register_generator,
    sample_params,
)
from opgen.tasks import Item, Task, with_unchanged


class Chains(InputGenerator):
    NAME = "chains"
    VERSION = 2  # 2: inputs on the role's side (opgen.rng.input_side: eval tasks never equal training ones)
    DEFAULTS = {"ops": "heldout", "depths": [1], "per_depth": None, "rows": None, "no_repeat": True, **INPUT_DEFAULTS}
    OPTIONS_SCHEMA = {"properties": {
        "ops": OP_SET, **DEPTH_PLAN_SCHEMA, "no_repeat": {"type": "boolean"}, **INPUT_OPTIONS,
    }}

    def __init__(self, options, ctx):
        super().__init__(options, ctx)
        o = self.options
        self.plan = DepthPlan(self)
        spec = o["ops"]
        members = [self.ctx.library.get(op_id) for op_id in self.op_set(spec, "ops")]
        binary = [op.id for op in members if op.n_inputs != 1]
        if binary and not isinstance(spec, str):
            # A named set quietly drops its interlace operators; an explicit list naming one is a mistake.
            raise self.fail("ops", f"chains nest unary operators; {', '.join(binary)} take two strings")
        self.unary = [op for op in members if op.n_inputs == 1]
        if not self.unary or (o["no_repeat"] and len(self.unary) < 2 and max(self.plan.depths) > 1):
            raise self.fail("ops", "too few unary operators for these depths")
        self._input = self.input_drawer()

    def count(self) -> int:
        return self.plan.total

    def row_context(self, i: int) -> str:
        return self.plan.context(i)

    def candidate(self, i: int, j: int) -> Item | None:
        rng = self.rng(i, j)
        x = self._input(rng)
        if x is None:
            return None
        program: expr.Expr = expr.Var()
        previous = None
        n = len(self.unary)
        max_len = self.max_len
        # The value is computed as the chain grows (innermost call first), with the evaluator's
        # guards: a call that would exceed the cap stops the candidate before the rest is drawn.
        value = x
        effect = self.options.get("require_effect", False)
        same = 0  # measure.unchanged_calls, counted as the chain grows (tests/test_generate_chains_atomic.py)
        try:
            if len(value) > max_len:
                raise expr.OutputTooLong(len(value), max_len)
            for _ in range(self.plan.depth(i)):
                if self.options["no_repeat"] and previous is not None:
                    k = rng.below(n - 1)
                    op = self.unary[k if k < previous else k + 1]
                    previous = k if k < previous else k + 1
                else:
                    previous = rng.below(n)
                    op = self.unary[previous]
                program = expr.Call(op.id, (program,), sample_params(op, rng))
                before, value = value, expr.call_capped(program, op.fn, (value,), max_len, op)
                if value == before:
                    if effect:
                        self.rejections["no_effect"] += 1
                        return None
                    same += 1
        except expr.OutputTooLong:
            self.rejections["output_too_long"] += 1
            return None
        return Item((with_unchanged(Task(program, x, value), same),))


register_generator(Chains)
