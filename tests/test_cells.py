"""The study's training cells (opgen.generate.cells): shared pools, groups, matched streams, RL pools.

Library-level tests here; tests/test_cells_build.py drives the bundled recipes through `opgen build`.
"""

from __future__ import annotations

from collections import Counter

import pytest

from opgen import expr as E
from opgen import ops
from opgen import pack as P
from opgen.generate import Context, GeneratorError, registry
from opgen.generate import cells as C

WHERE = "cell.yaml: splits.train.options"
V1_COMPS = {"pool": "trainop-mixed-d2-4", "rows": 15979, "ops": "train", "depths": [2, 3, 4]}


def make(name, options=None, digest="d", seed=1):
    cls = registry()[name]
    return cls(cls.resolve(options or {}, WHERE), Context(digest=digest, split="train", seed=seed, where=WHERE))


def tasks_of(gen, part=None):
    out = []
    for i in range(gen.count()):
        it = gen.item(i)
        if part is None or dict(it.meta).get("part") == part:
            out.extend(it.tasks)
    return out


def idset(tasks):
    return {t.identity() for t in tasks}


@pytest.fixture(scope="module")
def cells():
    return {
        "sft-d1": make("sft_cell", {"width": [1, 1]}, digest="d1"),
        "sft-v1": make("sft_cell", {"width": [1, 1], "compositions": V1_COMPS}, digest="v1"),
        "sft-c1": make("sft_cell", {"width": [1, 4]}, digest="c1"),
        "sft-eco": make("sft_cell", {"width": [1, 4], "compositions": V1_COMPS}, digest="eco"),
        "sft-c4": make("sft_cell", {"width": [1, 4], "compositions": {
            "pool": "trainop-mixed-d2", "rows": 12452, "ops": "train", "depths": [2]}}, digest="c4"),
        "sft-c4b": make("sft_cell", {"width": [1, 4], "compositions": {**V1_COMPS, "rows": 12436}}, digest="c4b"),
    }


def test_shared_atomic_pool_is_10000_tasks_400_per_operator():
    pool = C.atomic_pool()
    assert len(pool) == 10_000 and len(idset(pool)) == 10_000
    per_op = Counter(t.ops[0] for t in pool)
    assert set(per_op) == set(ops.ALL_IDS) and set(per_op.values()) == {400}
    assert all(t.depth == 1 for t in pool)


def test_every_sft_cell_holds_the_same_atomic_tasks(cells):
    reference = idset(C.atomic_pool())
    for name, gen in cells.items():
        atomic = tasks_of(gen, "atomic")
        assert len(atomic) == 10_000, name
        assert idset(atomic) == reference, name


def test_atomic_pool_does_not_depend_on_the_recipe_but_on_its_seed():
    a = make("sft_cell", {}, digest="one")
    b = make("sft_cell", {"width": [2, 3]}, digest="two")
    assert idset(a.atomic) == idset(b.atomic)
    assert idset(make("sft_cell", {}, seed=2).atomic) != idset(a.atomic)
    assert idset(make("sft_cell", {"atomic": {"pool": "another"}}).atomic) != idset(a.atomic)


@pytest.mark.parametrize("name, rows_atomic, comps", [
    ("sft-d1", 10_000, 0), ("sft-v1", 10_000, 15_979), ("sft-c1", None, 0), ("sft-eco", None, 15_979),
    ("sft-c4", None, 12_452), ("sft-c4b", None, 12_436)])
def test_cell_counts(cells, name, rows_atomic, comps):
    gen = cells[name]
    parts = Counter(dict(gen.item(i).meta)["part"] for i in range(gen.count()))
    assert parts["composition"] == comps
    if rows_atomic is not None:
        assert parts["atomic"] == rows_atomic
    else:  # groups of 1..4: fewer rows than tasks, at least a quarter
        assert 2_500 <= parts["atomic"] < 10_000
    assert gen.count() == parts["atomic"] + comps


def test_groups_are_independent_and_within_width(cells):
    gen = cells["sft-eco"]
    widths = Counter()
    for i in range(gen.count()):
        it = gen.item(i)
        if dict(it.meta)["part"] == "atomic":
            widths[len(it.tasks)] += 1
            assert len(set(it.recall_order())) == len(it.tasks)
    assert set(widths) == {1, 2, 3, 4}


def test_compositions_are_train_only_and_of_the_asked_depths(cells):
    for name, depths in (("sft-v1", {2, 3, 4}), ("sft-c4", {2}), ("sft-c4b", {2, 3, 4})):
        comps = tasks_of(cells[name], "composition")
        assert {t.depth for t in comps} == depths, name
        assert all(set(t.ops) <= set(ops.TRAIN_IDS) for t in comps)
        assert len(idset(comps)) == len(comps)
        assert all(E.uses_x(t.program) for t in comps)


def test_same_compositions_in_v1_and_eco_and_c4b_a_subset(cells):
    v1 = idset(tasks_of(cells["sft-v1"], "composition"))
    assert v1 == idset(tasks_of(cells["sft-eco"], "composition"))
    assert idset(tasks_of(cells["sft-c4b"], "composition")) < v1


def test_heldout_operators_only_in_depth1_atomic_tasks(cells):
    for name, gen in cells.items():
        for t in tasks_of(gen):
            if set(t.ops) & set(ops.HELDOUT_IDS):
                assert t.depth == 1 and len(t.ops) == 1, (name, t.expr_text)


def test_cell_rows_are_shuffled_but_deterministic(cells):
    again = make("sft_cell", {"width": [1, 4], "compositions": V1_COMPS}, digest="eco-elsewhere")
    eco = cells["sft-eco"]
    assert [eco.item(i) for i in range(0, eco.count(), 101)] == [again.item(i) for i in range(0, again.count(), 101)]
    first = [dict(eco.item(i).meta)["part"] for i in range(200)]
    assert "atomic" in first and "composition" in first


# ---------------------------------------------------------------- matched streams

MATCHED = {"compositions": V1_COMPS}


@pytest.fixture(scope="module")
def streams():
    return (make("matched_stream", {**MATCHED, "stream": "isolated"}, digest="iso"),
            make("matched_stream", {**MATCHED, "stream": "grouped"}, digest="grp"))


def test_matched_counts(streams):
    iso, grp = streams
    assert iso.count() == 400 * (48 + 76) and iso.rows_per_step == 124
    assert grp.count() == 400 * (20 + 76) and grp.rows_per_step == 96


def test_matched_step_hashes_equal(streams):
    iso, grp = streams
    hi, hg = iso.step_hashes(), grp.step_hashes()
    assert len(hi) == 400 and hi == hg
    assert len(set(hi)) == 400


def test_matched_rows_consumed_step_by_step_hold_the_same_tasks(streams):
    iso, grp = streams
    for s in (0, 1, 207, 208, 399):
        a = [t.identity() for i in range(s * 124, (s + 1) * 124) for t in iso.item(i).tasks]
        b = [t.identity() for i in range(s * 96, (s + 1) * 96) for t in grp.item(i).tasks]
        assert Counter(a) == Counter(b) and len(a) == 124
        assert P.multiset_hash(a) == iso.step_hashes()[s]
        assert {dict(iso.item(i).meta)["step"] for i in range(s * 124, (s + 1) * 124)} == {s}
        groups = [grp.item(i) for i in range(s * 96, (s + 1) * 96) if dict(grp.item(i).meta)["part"] == "atomic"]
        assert len(groups) == 20 and sum(len(g.tasks) for g in groups) == 48
        assert all(2 <= len(g.tasks) <= 4 and len(set(g.recall_order())) == len(g.tasks) for g in groups)


def test_matched_atomic_tasks_come_from_the_shared_pool(streams):
    iso, _ = streams
    assert idset(tasks_of(iso, "atomic")) == idset(C.atomic_pool())


def test_a_changed_option_breaks_the_match():
    a = make("matched_stream", {**MATCHED, "steps": 3, "stream": "isolated"})
    b = make("matched_stream", {**MATCHED, "steps": 3, "stream": "grouped", "comps_per_step": 75})
    assert a.step_hashes() != b.step_hashes()


# ---------------------------------------------------------------- RL pools


@pytest.mark.parametrize("mix", ["r1", "mda"])
def test_rl_pool_shapes(mix):
    gen = make("rl_pool", {"mix": mix, "rows": 400})
    got = [gen.item(i) for i in range(400)]
    for i, it in enumerate(got):
        chain = it.tasks[0]
        if i % 2 == 0:
            assert len(it.tasks) == 1 and dict(it.meta)["part"] == "chain"
        if i % 2 == 0 or mix == "mda":
            assert 10 <= chain.depth <= 20 and E.structure(chain.program) == "chain"
            assert set(chain.ops) <= set(ops.TRAIN_IDS) and len(chain.output) <= 1000
        if i % 2 == 1 and mix == "r1":
            assert 1 <= len(it.tasks) <= 12 and all(t.depth == 1 for t in it.tasks)
            assert len(set(it.recall_order())) == len(it.tasks)
        if i % 2 == 1 and mix == "mda":
            lits = it.tasks[1:]
            assert 1 <= len(lits) <= 2
            for t in lits:
                assert t.depth == 1 and isinstance(t.program.args[0], E.Lit)
                assert 8 <= len(t.program.args[0].value) <= 200
        for t in it.tasks:
            if set(t.ops) & set(ops.HELDOUT_IDS):
                assert t.depth == 1
            with E.recursion_headroom():
                assert E.evaluate(t.program, t.input) == t.output
    if mix == "r1":
        widths = Counter(len(it.tasks) for it in got[1::2])
        assert min(widths) == 1 and max(widths) == 12
        assert {o for it in got[1::2] for o in it.recall_order()} == set(ops.ALL_IDS)


@pytest.mark.parametrize("name, options, message", [
    ("sft_cell", {"width": [3, 2]}, ".width"),
    ("sft_cell", {"width": [1, 40]}, "distinct operators"),
    ("sft_cell", {"atomic": {"pool": "p", "ops": "everything"}}, "atomic"),
    ("sft_cell", {"atomic": None}, "needs atomic tasks"),
    ("sft_cell", {"compositions": {**V1_COMPS, "rows": 10, "pool_rows": 5}}, "compositions.rows"),
    ("matched_stream", {"atomic_per_step": 48, "grouped_rows_per_step": 5, "compositions": V1_COMPS}, "width"),
    ("matched_stream", {}, "no composition pool"),
    ("rl_pool", {"width": [1, 30]}, "width"),
    ("rl_pool", {"chain_ops": ["func_3"]}, "chain_ops"),
    ("rl_pool", {"mix": "r2"}, "mix"),
])
def test_bad_cell_options_name_the_option(name, options, message):
    with pytest.raises(GeneratorError) as exc:
        make(name, options)
    assert WHERE in str(exc.value) and message in str(exc.value)
