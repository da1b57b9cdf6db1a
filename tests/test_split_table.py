"""The table (opgen.splits.table) is the fast twin of opgen.splits.divergence.compare: the same D_A and
D_C for any two subsets of a collection, under every compound spec; its baselines are seeded."""

from __future__ import annotations

import random

import pytest

from opgen.generate import Context
from opgen.generate.trees import Trees
from opgen.splits import compounds as C
from opgen.splits import divergence as D
from opgen.splits import table as T

SPECS = [C.DEFAULT, C.EDGES, C.CompoundSpec(max_size=4, compounds_per="occurrence"),
         C.CompoundSpec(leaves=True, inputs=True, params=True, atoms_per="row"), C.CompoundSpec(max_size=2)]


@pytest.fixture(scope="module")
def items():
    opts = Trees.resolve({"ops": "all", "depths": [1, 2, 3, 4, 5], "per_depth": 40, "p_method": 0.2})
    gen = Trees(opts, Context(digest="table", split="t", seed=0))
    return [gen.first_valid(i)[1] for i in range(gen.count())]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: repr(s.as_dict()))
def test_the_table_measures_any_two_subsets_as_compare_does(items, spec):
    units = [C.row_units([t.program for t in it.tasks], [t.input for t in it.tasks], spec) for it in items]
    table = T.Table.of(iter(units), spec)
    rng = random.Random(7)
    for n_train, n_eval in ((100, 40), (150, 50), (3, 2)):
        idx = list(range(len(units)))
        rng.shuffle(idx)
        train, evals = idx[:n_train], idx[n_train:n_train + n_eval]
        ref = D.compare([units[i] for i in train], [units[i] for i in evals], spec)
        da, dc = table.divergences(train, evals)
        assert da == pytest.approx(ref["atom_divergence"], abs=1e-6)
        assert dc == pytest.approx(ref["compound_divergence"], abs=1e-6)
    # the weights over all rows are the reference's weights of each row
    cond = C.conditional(units) if C.needs_discount(spec) else None
    weights = table.compound_weights()
    for r in (0, 17, 99, len(units) - 1):
        got = {table.comp_vocab[c]: w for c, w in zip(weights.cols[weights.indptr[r]:weights.indptr[r + 1]],
                                                       weights.w[weights.indptr[r]:weights.indptr[r + 1]])}
        assert got == pytest.approx(C.compound_weights(units[r], cond, spec.compounds_per))


def test_a_baseline_is_seeded_and_spreads_over_its_seeds(items):
    units = [C.row_units([t.program for t in it.tasks], [t.input for t in it.tasks]) for it in items]
    table = T.Table.of(units, C.DEFAULT)
    a = T.random_baseline(table, 120, 40, ("x",))
    assert a == T.random_baseline(table, 120, 40, ("x",)) != T.random_baseline(table, 120, 40, ("y",))
    assert a["seeds"] == T.BASELINE_SEEDS and a["pool_rows"] == len(units)
    dc = a["compound_divergence"]
    assert dc["min"] <= dc["mean"] <= dc["max"] and dc["std"] > 0
