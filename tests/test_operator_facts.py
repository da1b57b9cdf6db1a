"""Operator facts live on the operator (opgen.ops): growth bounds, signature kinds, the bitmask width,
and the counts the card states. Each fact is checked against the executed sources, not restated."""

from __future__ import annotations

import itertools

import numpy as np
import op_cases
import pytest

from opgen import card, ops
from opgen import expr as E
from opgen.expr import recursion_headroom
from opgen.score import diagnose

STRINGS = ["", "a", "ab", "abc", "Hello, World!", "aAeEiIoOuU", "ßtraße", "x²", "racecar", "a" * 300]


@pytest.mark.parametrize("op", ops.OPERATORS, ids=ops.ALL_IDS)
def test_growth_bound_is_exact_and_unbounded_operators_grow_at_most_twofold(op):
    with recursion_headroom():
        for args in op_cases.cases(op, STRINGS):
            inputs, params = args[:op.n_inputs], args[op.n_inputs:]
            out = op.fn(*args)
            if op.out_len is not None:
                assert op.out_len(len(inputs[0]), params) == len(out), args
            else:
                # What _precheck leaves to the check after the call: no factor beyond two (plus a
                # sampled parameter's few characters); a new growing operator needs an out_len.
                assert len(out) <= 2 * sum(len(s) for s in inputs) + 4, (op.id, args)


def test_prechecked_operators_are_those_with_a_growth_bound():
    assert E.PRECHECKED == tuple(op.id for op in ops.OPERATORS if op.out_len is not None)
    assert E.PRECHECKED == ("func_1", "func_13", "func_15", "func_18")


def test_precheck_reads_the_operators_bound_before_the_call():
    huge = "x" * 1000
    with pytest.raises(E.OutputTooLong) as info:
        E.evaluate(E.Call("func_13", (E.Lit(huge),), ("|",)), "", max_len=1500)
    assert (info.value.length, info.value.limit) == (1999, 1500)  # the bound, not a built string
    assert E.evaluate(E.Call("func_15", (E.Lit("ab"),)), "", max_len=6) == "«a»«b»"
    with pytest.raises(E.OutputTooLong):
        E.evaluate(E.Call("func_15", (E.Lit("abc"),)), "", max_len=8)


def test_signature_kinds_partition_the_library_and_match_the_arity():
    assert set(op.kind for op in ops.OPERATORS) <= set(ops.KINDS)
    assert sorted(itertools.chain.from_iterable(ops.of_kind(k) for k in ops.KINDS),
                  key=lambda i: ops.get(i).index) == list(ops.ALL_IDS)
    assert {k: len(ops.of_kind(k)) for k in ops.KINDS} == {"s": 13, "s,int": 7, "s,str": 3, "s1,s2": 2}
    for arity, kinds in diagnose.KINDS_BY_ARITY.items():
        for k in kinds:
            assert all(ops.get(i).arity == arity for i in ops.of_kind(k))
    with pytest.raises(ValueError, match="unknown signature kind"):
        ops.of_kind("s,float")
    with pytest.raises(ValueError, match="unknown signature kind"):
        diagnose.probe_args("s,float")


@pytest.mark.parametrize("op", ops.OPERATORS, ids=ops.ALL_IDS)
def test_every_operator_runs_on_its_kinds_probes(op):
    # The diagnosis feeds each operator its kind's probe arguments: they must fit its signature.
    assert len(diagnose.true_outputs(op.id)) == len(diagnose.probe_args(op.kind))
    assert all(len(a) == op.arity for a in diagnose.probe_args(op.kind))


def test_mask_dtype_follows_the_library_size_and_refuses_past_64():
    assert ops.MASK_DTYPE == ops.mask_dtype(len(ops.OPERATORS)) == "uint32"
    assert ops.mask_dtype(32) == "uint32" and ops.mask_dtype(33) == "uint64" and ops.mask_dtype(64) == "uint64"
    with pytest.raises(RuntimeError, match="65 operators do not fit"):
        ops.mask_dtype(65)
    # The width matters: a 33rd operator's bit does not fit a uint32 mask, and numpy says so loudly.
    with pytest.raises(OverflowError):
        np.array([1 << 32], dtype="uint32")
    assert int(np.array([1 << 32], dtype=ops.mask_dtype(33))[0]) == 1 << 32
    assert max(1 << op.index for op in ops.OPERATORS) <= np.iinfo(ops.MASK_DTYPE).max


def test_card_counts_come_from_the_library():
    assert f"the {len(ops.HELDOUT_IDS)} held-out operators" in card.describe("heldout_trees_d1-8")[0]
    assert f"the {len(ops.TRAIN_IDS)} train operators" in card.describe("trainop_trees_d1-8")[0]
    assert f"all {len(ops.OPERATORS)} operators" in card.describe("stage15b")[0]
    # Today's numbers, so that the card's bytes stay what they were.
    assert "the 12 held-out" in card.describe("heldout_trees")[0] and "all 25 operators" in card.describe("stage15")[0]
