"""The mixed-structure tree generator: exact depth, its corrected defaults, purity per row index."""

from __future__ import annotations

from collections import Counter

import pytest

from opgen import expr as E
from opgen import generate as G
from opgen import ops
from opgen.rng import LOWERCASE, CounterRng, Rng, counter_key


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


def test_candidate_j_of_row_i_uses_the_counter_stream_of_digest_split_i_j():
    gen = make({"depths": [2], "rows": 5})
    ours, named = gen.rng(4, 7), CounterRng(counter_key("d", "s"), 4, 7)
    assert [ours.word() for _ in range(20)] == [named.word() for _ in range(20)]
    # and candidate j's draws are those of that stream: the first word picks the shape
    assert gen.candidate(4, 7) == make({"depths": [2], "rows": 5}).candidate(4, 7)


@pytest.mark.parametrize("options", [
    {"ops": "all", "depths": [1], "rows": 3000},
    {"ops": "train", "depths": [1, 2], "rows": 3000},
    {"ops": "all", "depths": [1, 2, 3], "rows": 1500, "max_output_chars": 12},  # details rejected too
    {"ops": ["func_5", "func_6", "func_1"], "depths": [2, 1], "per_depth": 700, "input_len": [0, 3], "alphabet": "ab"},
    {"ops": "heldout", "depths": [1, 2], "rows": 2000, "alphabet": "xyzé"},  # not ASCII: no bulk inputs
])
def test_rows_drawn_in_bulk_are_the_rows_drawn_one_by_one(options):
    bulk, single = make(options), make(options)
    n = bulk.count()
    one_by_one = [single.first_valid(i) for i in range(n)]
    assert bulk.first_valid_many(0, n) == one_by_one
    assert bulk.rejections == single.rejections
    assert make(options).first_valid_many(37, 400) == one_by_one[37:400]


@pytest.mark.parametrize("options", [
    pytest.param({"ops": "all", "depths": [1], "rows": 3000}, marks=pytest.mark.slow),
    pytest.param({"ops": "train", "depths": [1, 2], "rows": 3000}, marks=pytest.mark.slow),
    {"ops": "all", "depths": [1, 2, 3, 5, 8], "per_depth": 300},
    {"ops": ["func_21", "func_2", "func_7"], "depths": [1, 2, 3], "per_depth": 500, "alphabet": "abe"},
    pytest.param({"ops": "all", "depths": [2, 4], "per_depth": 300, "require_effect": True}, marks=pytest.mark.slow),
])
def test_the_unchanged_count_noted_while_drawing_is_the_measure_row_by_row(options):
    from opgen.generate.measure import task_unchanged_calls, unchanged_calls

    gen = make(options)
    n = gen.count()
    rows = [item for _, item in gen.first_valid_many(0, n)] + [make(options).first_valid(i)[1] for i in range(n)]
    noted = [item.tasks[0].__dict__.get("_unchanged") for item in rows]
    assert None not in noted  # every path notes it: bulk calls on x, bulk trees, rows one by one
    truth = [unchanged_calls(t.program, t.input) for t in (item.tasks[0] for item in rows)]
    assert noted == truth
    assert [task_unchanged_calls(item.tasks[0]) for item in rows] == truth
    if not options.get("require_effect"):
        assert any(truth) and 0 in truth  # both kinds of row occur


def test_bulk_rows_report_an_impossible_row_like_single_rows():
    # func_1 repeats its input at least twice: 2-3 characters in, never 3 out (the cap is above every
    # input, so the split is not refused up front; each row's search gives up)
    options = {"ops": ["func_1"], "depths": [1], "rows": 3, "input_len": [2, 3], "max_output_chars": 3,
               "max_attempts": 5}
    with pytest.raises(G.GeneratorError) as single:
        make(options).first_valid(0)
    with pytest.raises(G.GeneratorError) as bulk:
        make(options).first_valid_many(0, 3)
    assert "row 0" in str(bulk.value) and "5 attempts" in str(bulk.value)
    assert str(single.value).split("(")[0] == str(bulk.value).split("(")[0]


def test_interlace_draws_both_operators_when_both_are_in_the_set():
    gen = make({"ops": "all", "depths": [1, 2], "rows": 1500, "p_binary": 0.5})
    seen = Counter(op for i in range(gen.count()) for op in gen.item(i).tasks[0].ops)
    assert seen["func_7"] > 50 and seen["func_20"] > 50


def test_rejections_are_counted_by_reason():
    gen = make({"ops": "train", "depths": [1], "rows": 200})
    for i in range(200):
        gen.item(i)
    assert gen.rejections["no_x"] > 0
    # input_side: inputs redrawn onto the split's side (opgen.rng.input_side), about one per row
    assert set(gen.rejections) <= {"no_x", "no_operator_call", "output_too_long", "input_side"}
    assert 100 < gen.rejections["input_side"] < 300


def test_output_cap_rejects_explosive_programs():
    gen = make({"ops": ["func_1", "func_9", "func_3", "func_22"], "depths": [4],
                "per_depth": 20, "max_output_chars": 60})
    for i in range(20):
        assert len(gen.item(i).tasks[0].output) <= 60
    assert gen.rejections["output_too_long"] > 0


@pytest.mark.parametrize("lo, hi, alphabet", [(3, 10, "abcdefghijklmnopqrstuvwxyz"), (0, 4, "ab"), (1, 1, "xyz"),
                                               (0, 0, "q")])
def test_bulk_texts_are_the_texts_drawn_one_by_one(lo, hi, alphabet):
    import numpy as np

    from opgen.rng import counter_blocks

    bulk, single = G.text_vectorizer(lo, hi, alphabet), G.text_drawer(lo, hi, alphabet)
    seeds, words = counter_blocks(77, np.arange(2000), np.zeros(2000, dtype=np.int64))
    flat, begins, lengths, ok = bulk(words[:, 1])
    for r in range(2000):
        rng = CounterRng.resume(int(seeds[r]), tuple(words[r].tolist()), 1)
        text = single(rng)
        if ok[r]:
            assert flat[begins[r]:begins[r] + lengths[r]] == text
    assert G.text_vectorizer(3, 5, "aé") is None and G.text_vectorizer(1, 20, LOWERCASE) is None


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
    # operator call with 0.2 * 0.5 * 0.75 (a concatenation holding x) + 0.8 * 0.02 * 0.5 (a builtin
    # method on x) = 0.083. (Before the counter streams this test expected 0.075 within 0.008 and
    # passed by luck: it left out the method.)
    gen = make({"ops": "all", "depths": [1], "rows": 1})
    n = 20_000
    for j in range(n):
        gen.candidate(0, j)
    assert abs(gen.rejections["no_x"] / n - 0.45) < 0.015
    assert abs(gen.rejections["no_operator_call"] / n - 0.083) < 0.006  # 3 standard deviations
    # depth 3 goes through the per-node draws above the depth-2 tables: every path still has 3 levels
    deep = make({"ops": "all", "depths": [3], "rows": 200, "p_binary": 0.6, "p_method": 0.3})
    for i in range(200):
        prog = deep.item(i).tasks[0].program
        assert E.depth(prog) == E.min_depth(prog) == 3
