"""Atoms, compounds and divergence (opgen.splits): hand-computed cases, DBCA's weights, the mcd search."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from opgen import expr as E
from opgen import ops
from opgen.splits import compounds as C
from opgen.splits import divergence as D
from opgen.splits import kinds as K
from opgen.splits import mcd


def units(*sources: str, spec: C.CompoundSpec = C.DEFAULT) -> list[C.RowUnits]:
    return [C.row_units([E.parse(s)], ["abc"], spec) for s in sources]


# ---------------------------------------------------------------- atoms and compounds


def test_edges_are_compounds_with_argument_positions():
    (u,) = units("func_5(func_3(func_1(x, 2)), 'ab')", spec=C.EDGES)
    assert u.atoms == ("func_1", "func_3", "func_5")
    assert u.compounds == ("func_3(func_1)", "func_5(func_3)")
    (u,) = units("func_20(x, func_3(x))", spec=C.EDGES)
    assert u.compounds == ("func_20(_,func_3)",)
    (u,) = units("func_20(func_3(x), x)", spec=C.EDGES)
    assert u.compounds == ("func_20(func_3,_)",)


def test_methods_and_concatenation_are_nodes():
    (u,) = units("(func_3(x) + (func_9(x)).upper())", spec=C.EDGES)
    assert u.atoms == ("+", ".upper", "func_3", "func_9")
    assert u.compounds == ("+(_,.upper)", "+(func_3,_)", ".upper(func_9)")


def test_leaves_and_inputs_are_atoms_only_when_asked():
    spec = C.CompoundSpec(max_size=2, leaves=True, inputs=True)
    (u,) = units("func_20(x, 'abcdefghij')", spec=spec)
    assert u.atoms == ("func_20", "input:0-3", "lit:long", "x")
    assert u.compounds == ("func_20(_,lit:long)", "func_20(x,_)")


def test_bigger_fragments_up_to_max_size():
    (u,) = units("func_3(func_9(func_17(x)))", spec=C.CompoundSpec(max_size=3))
    assert u.compounds == ("func_3(func_9(func_17))", "func_3(func_9)", "func_9(func_17)")


def test_edge_text_is_the_compound_text_of_an_edge():
    for src in ("func_20(x, func_3(x))", "func_5(func_3(x), 'ab')", "(func_2(x)).upper()", "(x + func_3(x))"):
        tree = E.parse(src)
        assert {C.edge_text(p, i, c) for p, i, c in C.edges(tree)} == set(C.row_units([tree], spec=C.EDGES).compounds)


def test_dbca_weight_discounts_a_compound_that_occurs_inside_a_bigger_one():
    spec = C.CompoundSpec(max_size=3)
    rows = units("func_3(func_9(func_17(x)))", "func_3(func_9(x))", spec=spec)
    atoms, comps = C.histograms(rows, spec)
    # func_3(func_9) occurs twice, once inside func_3(func_9(func_17)): P(big | small) = 1/2, so it weighs
    # 1 - 1/2 in the first row and 1 in the second; func_9(func_17) only ever occurs inside the big one.
    assert comps == {"func_3(func_9)": 1.5, "func_3(func_9(func_17))": 1.0}
    assert atoms == {"func_3": 2, "func_9": 2, "func_17": 1}


def test_a_compound_counts_once_per_row():
    _, comps = C.histograms(units("func_3(func_9(func_3(func_9(x))))", spec=C.EDGES), C.EDGES)
    assert comps == {"func_3(func_9)": 1, "func_9(func_3)": 1}


def test_counting_per_occurrence_and_parameters_as_atoms():
    spec = C.CompoundSpec(max_size=2, compounds_per="occurrence", params=True)
    atoms, comps = C.histograms(units("func_3(func_9(func_3(func_9(func_1(x, 2)))))", spec=spec), spec)
    assert comps == {"func_3(func_9)": 2, "func_9(func_3)": 1, "func_9(func_1)": 1}
    # atoms count every node by default (the paper's atom distribution counts rule applications)
    assert atoms == {"func_3": 2, "func_9": 2, "func_1": 1, "func_1=2": 1}
    once = C.CompoundSpec(max_size=2, atoms_per="row")
    assert C.histograms(units("func_3(func_9(func_3(x)))", spec=once), once)[0] == {"func_3": 1, "func_9": 1}
    (u,) = units("func_13(func_5(func_8(x, 2), 'abc'), '-')", spec=C.CompoundSpec(params=True))
    assert {"func_13='-'", "func_5=text", "func_8=2"} <= set(u.atoms)


def test_compound_spec_errors_name_the_field():
    with pytest.raises(C.CompoundError, match=r"compounds\.max_size"):
        C.CompoundSpec.from_dict({"max_size": 9})
    with pytest.raises(C.CompoundError, match=r"compounds\.size: unknown key"):
        C.CompoundSpec.from_dict({"size": 2})


# ---------------------------------------------------------------- divergence


def test_chernoff_hand_computed():
    # p = (1/2, 1/2), q = (1/4, 3/4): sqrt(1/8) + sqrt(3/8)
    assert D.chernoff({"a": 1, "b": 1}, {"a": 1, "b": 3}, 0.5) == pytest.approx(math.sqrt(1 / 8) + math.sqrt(3 / 8))
    # p = (1), q = (1/2, 1/2), alpha 0.1: 1^0.1 * (1/2)^0.9
    assert D.compound_divergence({"a": 2}, {"a": 1, "b": 1}) == pytest.approx(1 - 0.5 ** 0.9)
    assert D.atom_divergence({"a": 1, "b": 1}, {"a": 1, "b": 3}) == pytest.approx(
        1 - math.sqrt(1 / 8) - math.sqrt(3 / 8))
    assert D.chernoff({"a": 1}, {"b": 1}, 0.5) == 0.0
    assert D.atom_divergence({}, {}) == 0.0 and D.atom_divergence({"a": 1}, {}) == 1.0


def test_identical_sets_have_zero_divergence():
    rows = units("func_3(func_9(x))", "func_20(x, func_3(x))", "(func_2(x)).upper()", "func_1(x, 3)")
    for spec in (C.DEFAULT, C.CompoundSpec(max_size=3, leaves=True, inputs=True)):
        r = D.compare(rows, list(rows), spec)
        assert r["atom_divergence"] == 0.0 and r["compound_divergence"] == 0.0
        assert r["heldout_compounds"] == [] and r["heldout_share_of_eval_rows"] == 0.0


def test_compare_names_heldout_compounds_and_their_share():
    train = units("func_3(func_9(x))", "func_9(func_17(x))")
    evals = units("func_9(func_3(x))", "func_3(func_9(x))")
    r = D.compare(train, evals)
    assert r["heldout_compounds"] == ["func_9(func_3)"]
    assert r["heldout_share_of_eval_rows"] == 0.5
    assert r["train_rows_with_heldout_compound"] == 0
    # hand: train compounds {3(9): 1, 9(17): 1}, eval {9(3): 1, 3(9): 1}: C_0.1 = 0.5^0.1 * 0.5^0.9 = 0.5
    assert r["compound_divergence"] == pytest.approx(0.5)


# ---------------------------------------------------------------- split kinds


def test_systematicity_share_is_seeded_and_names_errors():
    a = K.resolve({"kind": "systematicity", "share": 0.1, "ops": "train"}, "r.yaml", 3)
    b = K.resolve({"kind": "systematicity", "share": 0.1, "ops": "train"}, "r.yaml", 3)
    c = K.resolve({"kind": "systematicity", "share": 0.1, "ops": "train"}, "r.yaml", 4)
    assert a is not None and b is not None and c is not None
    assert a.config["pairs"] == b.config["pairs"] != c.config["pairs"]
    assert len(a.config["pairs"]) == round(0.1 * 13 * 14 / 2)
    with pytest.raises(K.SplitError, match=r"r\.yaml: split\.pairs\[0\]: unknown operator 'func_99'"):
        K.resolve({"kind": "systematicity", "pairs": [["func_3", "func_99"]]}, "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split\.kind: 'sideways' is not a split kind"):
        K.resolve({"kind": "sideways"}, "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split: give exactly one of 'pairs'"):
        K.resolve({"kind": "systematicity"}, "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split\.max_train_depth"):
        K.resolve({"kind": "productivity", "max_train_depth": 0}, "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split: 'max_train_depth' is a required property"):
        K.resolve({"kind": "productivity"}, "r.yaml", 0)


def test_a_kind_name_alone_is_a_split_with_defaults():
    from opgen import recipe as R

    recipe = R.resolve({"name": "r", "split": "heldout-ops",
                        "splits": {"t": {"generator": "trees", "role": "train", "options": {"rows": 3}}}}, "r.yaml")
    assert recipe.split.kind == "heldout-ops" and recipe.split.config["ops"] == list(ops.HELDOUT_IDS)
    with pytest.raises(R.RecipeError, match=r"r\.yaml: split: give exactly one of 'pairs'"):
        R.resolve({"name": "r", "split": "systematicity", "splits": {"t": {"generator": "trees", "role": "train"}}},
                  "r.yaml")


def test_systematicity_rule_holds_out_both_directions_of_a_pair():
    rule = K.resolve({"kind": "systematicity", "pairs": [["func_9", "func_3"]], "rule": "adjacent"}, "r.yaml", 0)
    assert rule is not None
    assert rule.heldout_compounds() == ["func_3(func_9)", "func_9(func_3)"]
    assert rule.tree_holds_heldout(E.parse("func_17(func_9(func_3(x)))"))
    assert not rule.tree_holds_heldout(E.parse("func_9(func_17(func_3(x)))"))


def test_the_path_rule_holds_a_pair_out_of_any_one_root_to_leaf_path():
    rule = K.resolve({"kind": "systematicity", "pairs": [["func_9", "func_3"], ["func_4", "func_4"]]}, "r.yaml", 0)
    assert rule is not None and rule.config["rule"] == "path"
    assert rule.heldout_compounds() == ["func_3(..func_9)", "func_4(..func_4)", "func_9(..func_3)"]
    for held in ("func_9(func_17(func_3(x)))", "func_3((func_9(x) + 'ab'))", "(func_3(func_9(x))).upper()",
                 "func_20(x, func_1(func_3(x), 2))".replace("func_1(func_3(x), 2)", "func_9(func_3(x))"),
                 "func_4(func_17(func_4(x)))"):
        assert rule.tree_holds_heldout(E.parse(held)), held
    for free in ("(func_3(x) + func_9(x))", "func_20(func_3(x), func_9(x))", "func_4(func_17(x))"):
        assert not rule.tree_holds_heldout(E.parse(free)), free


# ---------------------------------------------------------------- the mcd search


def _pool(draw_rows: list[list[tuple[int, int]]]) -> list[C.RowUnits]:
    names = [f"func_{i}" for i in range(6)]
    out = []
    for edges_ in draw_rows:
        occ = tuple((f"{names[a]}({names[b]})", frozenset({2 * k, 2 * k + 1})) for k, (a, b) in enumerate(edges_))
        atoms = tuple(sorted({names[x] for e in edges_ for x in e}))
        out.append(C.RowUnits(atoms, occ))
    return out


rows_strategy = st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=3),
                         min_size=30, max_size=90)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, seed=st.integers(0, 10**6), bound=st.sampled_from([0.02, 0.1, 0.3]),
       method=st.sampled_from(["exchange", "greedy"]))
def test_mcd_never_exceeds_its_atom_bound_and_beats_a_random_split(rows, seed, bound, method):
    pool = _pool(rows)
    n_train, n_eval = len(pool) // 2, len(pool) // 5
    try:
        sel = mcd.search(pool, n_train, n_eval, (seed,), max_atom_divergence=bound, candidates=8, rounds=20,
                         method=method)
    except mcd.McdError:
        train, evals = mcd.random_split(len(pool), n_train, n_eval, (seed,))
        r = D.compare([pool[i] for i in train], [pool[i] for i in evals])
        assert r["atom_divergence"] > bound  # refused only when even the random start breaks the bound
        assume(False)
        return
    assert len(sel.train) == n_train and len(sel.eval) == n_eval and not set(sel.train) & set(sel.eval)
    # the search's fast histograms agree with the reference measure
    measured = D.compare([pool[i] for i in sel.train], [pool[i] for i in sel.eval])
    assert measured["atom_divergence"] == pytest.approx(sel.atom_divergence, abs=1e-6)
    assert measured["compound_divergence"] == pytest.approx(sel.compound_divergence, abs=1e-6)
    assert sel.atom_divergence <= bound
    train, evals = mcd.random_split(len(pool), n_train, n_eval, (seed,))
    random = D.compare([pool[i] for i in train], [pool[i] for i in evals])
    if random["atom_divergence"] <= bound:  # else the exchange search first moved rows to meet the bound
        assert sel.compound_divergence >= random["compound_divergence"] - 1e-9
    else:
        assert method == "exchange"  # the H searches refuse such a start
    # no held-out compound in any training row
    held = set(sel.heldout)
    assert not any(held & set(pool[i].compounds) for i in sel.train)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, seed=st.integers(0, 10**6), bound=st.sampled_from([0.02, 0.1, 0.3]))
def test_annealed_mcd_never_exceeds_its_atom_bound_and_reaches_the_greedy_split(rows, seed, bound):
    pool = _pool(rows)
    n_train, n_eval = len(pool) // 2, len(pool) // 5
    kw = {"max_atom_divergence": bound, "candidates": 8, "rounds": 20}
    try:
        greedy = mcd.search(pool, n_train, n_eval, (seed,), method="greedy", **kw)
    except mcd.McdError:
        assume(False)
        return
    sel = mcd.search(pool, n_train, n_eval, (seed,), method="anneal", steps=60, **kw)
    assert sel.method == "anneal" and sel.anneal_steps == 60
    assert len(sel.train) == n_train and len(sel.eval) == n_eval and not set(sel.train) & set(sel.eval)
    measured = D.compare([pool[i] for i in sel.train], [pool[i] for i in sel.eval])
    assert measured["atom_divergence"] == pytest.approx(sel.atom_divergence, abs=1e-6)
    assert measured["compound_divergence"] == pytest.approx(sel.compound_divergence, abs=1e-6)
    assert sel.atom_divergence <= bound
    assert sel.compound_divergence >= greedy.compound_divergence - 1e-9
    held = set(sel.heldout)
    assert not any(held & set(pool[i].compounds) for i in sel.train)
    assert mcd.search(pool, n_train, n_eval, (seed,), method="anneal", steps=60, **kw) == sel


def test_mcd_is_deterministic_from_its_seed():
    pool = _pool([[(i % 6, (i * 7) % 6), ((i * 3) % 6, (i + 1) % 6)] for i in range(200)])
    for method in mcd.SEARCHES:
        a = mcd.search(pool, 100, 30, ("s", 1), max_atom_divergence=0.3, method=method)
        b = mcd.search(pool, 100, 30, ("s", 1), max_atom_divergence=0.3, method=method)
        assert a == b
        assert a.compound_divergence > a.baseline["compound_divergence"]["mean"]


@pytest.mark.parametrize("leaves", [False, True])
def test_edge_fast_path_equals_the_fragment_enumeration(leaves):
    """The builder's edge path (max_size 2) is the general enumeration's two-node fragments."""
    from opgen.generate import Context
    from opgen.generate.trees import Trees

    opts = Trees.resolve({"ops": "all", "depths": [1, 2, 3, 4, 5], "per_depth": 40})
    gen = Trees(opts, Context(digest="t", split="t", seed=0))
    spec = C.CompoundSpec(max_size=2, leaves=leaves)
    for i in range(gen.count()):
        trees = [t.program for t in gen.first_valid(i)[1].tasks]
        fast = C._edge_occurrences(trees, spec)
        slow = C._fragment_occurrences(trees, spec)
        assert sorted(fast[0]) == sorted(slow[0])
        assert sorted(fast[1], key=repr) == sorted(slow[1], key=repr)


def test_bundled_split_recipes_resolve_and_the_cells_share_their_pairs():
    from opgen import recipe as R

    kinds = {n: R.load(n).split.kind for n in ("split-systematicity", "split-mcd", "split-productivity",
                                                 "sft-eco-systematicity", "rl-r1-systematicity")}
    assert kinds["split-mcd"] == "mcd" and kinds["split-productivity"] == "productivity"
    sft, rl = R.load("sft-eco-systematicity"), R.load("rl-r1-systematicity")
    assert sft.split.config["pairs"] == rl.split.config["pairs"] and len(sft.split.config["pairs"]) == 9
    # the sft cell's composition pool gets the rule; its eval split requires a held-out pair
    train = next(s for s in sft.splits if s.role == "train")
    assert train.options["compositions"]["split"] == sft.split.config
    assert sft.split.admitter("eval") is not None
    # the MCD cell: its compositions are the search's train side (their options are the pool's)
    mcd_cell = R.load("sft-eco-mcd")
    assert mcd_cell.split.kind == "mcd"
    cell = next(s for s in mcd_cell.splits if s.role == "train")
    assert cell.generator == "sft_cell"
    assert cell.options["compositions"] == {"pool": "mcd-train-d2-4", "rows": 15979, "split": mcd_cell.split.config}
    assert [s.generator for s in mcd_cell.splits if s.role == "eval"] == ["mcd_side"]
