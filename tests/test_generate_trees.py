"""The mixed-structure tree generator: exact depth, its corrected defaults, purity per row index."""

from __future__ import annotations

from collections import Counter

import pytest

from opgen import expr as E
from opgen import generate as G
from opgen import ops
from opgen.rng import Rng


def make(options: dict, split: str = "s", digest: str = "d") -> G.Generator:
    cls = G.get("trees")
    ctx = G.Context(digest=digest, split=split, seed=0, where="r.yaml: splits.s.options")
    return cls(cls.resolve(options, ctx.where), ctx)


def test_registry_discovers_every_generator_module():
    names = set(G.registry())
    assert {"atomic", "trees", "chains"} <= names


@pytest.mark.parametrize("ops_spec", ["heldout", "train", "all"])
def test_every_path_has_exactly_the_depth_and_constraints_hold(ops_spec):
    gen = make({"ops": ops_spec, "depths": [1, 2, 3, 5, 8], "per_depth": 40})
    allowed = set(ops.resolve_set(ops_spec))
    for i in range(gen.count()):
        task = gen.item(i).tasks[0]
        d = gen.plan.depth(i)
        assert E.depth(task.program) == E.min_depth(task.program) == d
        assert E.uses_x(task.program)
        assert task.ops and set(task.ops) <= allowed
        assert len(task.output) <= 1000
        assert E.evaluate(task.program, task.input) == task.output
        assert 3 <= len(task.input) <= 10 and task.input.isalpha() and task.input.islower()


def test_rows_are_pure_functions_of_the_index_and_split():
    a, b = make({"depths": [3], "rows": 50}), make({"depths": [3], "rows": 50})
    assert [a.item(i) for i in reversed(range(50))][::-1] == [b.item(i) for i in range(50)]
    other = make({"depths": [3], "rows": 50}, split="t")
    assert sum(a.item(i) == other.item(i) for i in range(50)) < 5


def test_candidate_j_of_row_i_uses_rng_of_digest_split_i_j():
    gen = make({"depths": [2], "rows": 5})
    fast, slow = gen.rng(4, 7), Rng("d", "s", 4, 7)
    assert [fast.word() for _ in range(20)] == [slow.word() for _ in range(20)]


def test_interlace_draws_both_operators_when_both_are_in_the_set():
    gen = make({"ops": "all", "depths": [1, 2], "rows": 1500, "p_binary": 0.5})
    seen = Counter(op for i in range(gen.count()) for op in gen.item(i).tasks[0].ops)
    assert seen["func_7"] > 50 and seen["func_20"] > 50


def test_rejections_are_counted_by_reason():
    gen = make({"ops": "train", "depths": [1], "rows": 200})
    for i in range(200):
        gen.item(i)
    assert gen.rejections["no_x"] > 0
    assert set(gen.rejections) <= {"no_x", "no_operator_call", "output_too_long"}


def test_output_cap_rejects_explosive_programs():
    gen = make({"ops": ["func_1", "func_9", "func_3", "func_22"], "depths": [4],
                "per_depth": 20, "max_output_chars": 60})
    for i in range(20):
        assert len(gen.item(i).tasks[0].output) <= 60
    assert gen.rejections["output_too_long"] > 0


def test_fast_text_is_uniform_over_lengths_and_letters():
    rng = Rng("text")
    words = [G.text(rng, 3, 10) for _ in range(4000)]
    lengths = Counter(len(w) for w in words)
    assert set(lengths) == set(range(3, 11)) and min(lengths.values()) > 350
    letters = Counter("".join(words))
    assert set(letters) == set("abcdefghijklmnopqrstuvwxyz") and min(letters.values()) > 0.7 * max(letters.values())


@pytest.mark.parametrize("options, fragment", [
    ({"depths": [1], "rows": 5, "p_binary": 2}, "splits.s.options.p_binary"),
    ({"depths": [1], "rows": 5, "colour": "red"}, "colour"),
    ({"depths": [1]}, "exactly one of per_depth"),
    ({"depths": [1], "rows": 5, "input_len": [9, 3]}, "input_len"),
    ({"depths": [1], "rows": 5, "ops": ["func_99"]}, "splits.s.options.ops"),
])
def test_bad_options_name_where(options, fragment):
    with pytest.raises(G.GeneratorError, match=fragment.replace(".", r"\.")):
        make(options)


def test_shape_draws_keep_the_native_probabilities():
    # depth 1, ops "all" (so interlace operators exist): a candidate has no x with probability
    # 0.8 * 0.5 (unary over a literal) + 0.2 * 0.25 (binary over two literals) = 0.45, and no
    # operator call (a concatenation holding x) with 0.2 * 0.5 * 0.75 = 0.075.
    gen = make({"ops": "all", "depths": [1], "rows": 1})
    n = 20_000
    for j in range(n):
        gen.candidate(0, j)
    assert abs(gen.rejections["no_x"] / n - 0.45) < 0.015
    assert abs(gen.rejections["no_operator_call"] / n - 0.075) < 0.008
    # depth 3 goes through the per-node draws above the depth-2 tables: every path still has 3 levels
    deep = make({"ops": "all", "depths": [3], "rows": 200, "p_binary": 0.6, "p_method": 0.3})
    for i in range(200):
        prog = deep.item(i).tasks[0].program
        assert E.depth(prog) == E.min_depth(prog) == 3
