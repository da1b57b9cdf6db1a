"""The builder's atom/compound tally (counted from the generator's trees as rows are drawn, redrawn
rows swapped out) equals its reference: the histograms of the written rows read back and parsed
(opgen.splits.rows), which is what split recipes' certificates still use."""

from __future__ import annotations

import json

import pytest
from det_recipe import det_recipe

from opgen import build as B
from opgen import expr as E
from opgen import recipe as R
from opgen.splits import certificate as SC
from opgen.splits import compounds as C
from opgen.splits import rows as SR

# Cross-shard duplicates (phase 3 redraws), and a chains split beside the trees.
RECIPE = det_recipe("tally", trees_rows=300, chains=True)


def _read_back(out, name):
    files = sorted(out.glob(f"{name}*.parquet"))
    return SC.histogram_section(SR.units_of(files, C.EDGES), C.EDGES)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_the_tally_equals_the_rows_read_back_redraws_included(tmp_path, monkeypatch, workers):
    (tmp_path / "r.yaml").write_text(RECIPE)
    redrawn = []
    finish = B._finish

    def spy(task):
        redrawn.extend(task.patches)
        return finish(task)

    if workers == 1:  # in this process: see that phase 3 redrew rows
        monkeypatch.setattr(B, "_finish", spy)
    out = tmp_path / "out"
    B.build([R.load(str(tmp_path / "r.yaml"))], out, workers=workers)
    man = json.loads((out / "manifest.json").read_text())
    if workers == 1:
        assert redrawn, "the recipe no longer makes cross-shard duplicates: the swap is untested"
    for name in ("atoms", "trees", "chains"):
        assert man["splits"][name]["compounds"] == _read_back(out, name), name


@pytest.mark.slow
def test_bundled_suite_tally_equals_read_back(tmp_path):
    out = tmp_path / "suite"
    B.build([R.load("eval-suite")], out, limit=200)
    man = json.loads((out / "manifest.json").read_text())
    for name in man["splits"]:
        assert man["splits"][name]["compounds"] == _read_back(out, name), name


def test_a_row_counted_and_uncounted_leaves_nothing():
    t = C.Tally(C.EDGES)
    trees = [E.parse("func_1(func_3(x), 2)"), E.parse("func_3(x + x)")]
    t.add(trees, ["ab", "c"])
    assert t.rows == 1 and t.histograms()[1]
    t.add(trees, ["ab", "c"], -1)
    assert t.rows == 0 and t.histograms() == ({}, {})


def test_a_spec_with_discounts_cannot_be_tallied():
    with pytest.raises(C.CompoundError, match="max_size"):
        C.Tally(C.CompoundSpec(max_size=3))


@pytest.mark.parametrize("spec", [C.EDGES, C.CompoundSpec(max_size=2, atoms_per="row", leaves=True),
                                  C.CompoundSpec(max_size=2, atoms_per="row", inputs=True),
                                  C.CompoundSpec(max_size=2, atoms_per="row", leaves=True, inputs=True)])
def test_the_tally_equals_the_histograms_of_row_units_for_every_edge_spec(spec):
    rows = [(["func_1(func_3(x), 2)", "func_3(x + x)"], ["ab", "c" * 40]), (["func_9((x + x))"], [""]),
            (["func_7(func_3(x), func_1(x, 3))"], ["q" * 9]), (["x.upper().lower()", "func_3('lit')"], ["z"]),
            (["func_1(func_3(x), 2)"], ["ab"])]
    tally = C.Tally(spec)
    units = []
    for texts, inputs in rows:
        trees = [E.parse(t) for t in texts]
        tally.add(trees, inputs)
        units.append(C.row_units(trees, inputs, spec))
    assert tally.histograms() == C.histograms(units, spec)


def test_a_spec_that_counts_occurrences_or_params_cannot_be_tallied():
    for spec in (C.CompoundSpec(max_size=2), C.CompoundSpec(max_size=2, atoms_per="row", compounds_per="occurrence"),
                 C.CompoundSpec(max_size=2, atoms_per="row", params=True)):
        with pytest.raises(C.CompoundError, match="once per row"):
            C.Tally(spec)
