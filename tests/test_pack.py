"""Co-occurrence packing plans and matched streams (opgen.pack)."""

from __future__ import annotations

from collections import Counter

import pytest

from opgen import ops
from opgen import pack as P
from opgen.rng import Rng

# The study's atomic pool: 400 tasks per operator, labelled by operator (counted from the library).
POOL = 400 * len(ops.STUDY)
LABELS = [ops.STUDY.ids[i % len(ops.STUDY)] for i in range(POOL)]


def test_widths_in_range_and_sum():
    for seed in range(20):
        widths = P.plan_widths(997, 1, 4, Rng("w", seed))
        assert sum(widths) == 997
        assert all(1 <= w <= 4 for w in widths)


def test_widths_fixed_group_count():
    for seed in range(20):
        widths = P.plan_widths(48, 2, 4, Rng("w", seed), groups=20)
        assert len(widths) == 20 and sum(widths) == 48 and all(2 <= w <= 4 for w in widths)


def test_widths_leave_no_short_tail():
    # 7 tasks in groups of 3..4 only works as 3 + 4 or 4 + 3: a greedy draw of 4 then 3 is fine,
    # but never a leftover group of 1 or 2.
    for seed in range(50):
        widths = P.plan_widths(7, 3, 4, Rng("w", seed))
        assert sorted(widths) == [3, 4]


@pytest.mark.parametrize("n, lo, hi, groups", [(5, 3, 4, None), (48, 2, 4, 30), (10, 0, 3, None), (4, 3, 2, None)])
def test_impossible_widths_fail_clearly(n, lo, hi, groups):
    with pytest.raises(P.WidthError):
        P.plan_widths(n, lo, hi, Rng("w"), groups=groups)


def test_pack_uses_every_task_exactly_once():
    groups = P.pack(LABELS, 1, 4, Rng("p"))
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(len(LABELS)))
    assert all(1 <= len(g) <= 4 for g in groups)


def test_pack_groups_are_independent():
    # Independent: no operator twice in one group (each recall block stands for one task).
    for g in P.pack(LABELS, 1, 4, Rng("p")):
        assert len({LABELS[i] for i in g}) == len(g)


def test_pack_is_deterministic_and_keyed():
    a = P.pack(LABELS, 1, 4, Rng("p", 1))
    assert a == P.pack(LABELS, 1, 4, Rng("p", 1))
    assert a != P.pack(LABELS, 1, 4, Rng("p", 2))


def test_pack_does_not_depend_on_arrival_order_of_labels():
    # The same multiset of labels in another order packs into the same groups of labels.
    permuted = sorted(LABELS)
    a = [tuple(LABELS[i] for i in g) for g in P.pack(LABELS, 2, 4, Rng("p"))]
    b = [tuple(permuted[i] for i in g) for g in P.pack(permuted, 2, 4, Rng("p"))]
    assert a == b


def test_pack_fails_when_operators_run_out():
    with pytest.raises(P.PackError, match="distinct operators"):
        P.pack(["func_1"] * 6, 2, 2, Rng("p"))


def test_pack_single_label_width_one_is_fine():
    assert sorted(P.pack(["func_1"] * 3, 1, 1, Rng("p"))) == [(0,), (1,), (2,)]


def test_epoch_stream_visits_every_index_before_repeating():
    s = P.epoch_stream(10, 25, Rng("e"))
    assert sorted(s[:10]) == list(range(10)) and sorted(s[10:20]) == list(range(10))
    assert len(s) == 25


def test_multiset_hash_ignores_order_but_not_multiplicity():
    assert P.multiset_hash(["a", "b", "b"]) == P.multiset_hash(["b", "a", "b"])
    assert P.multiset_hash(["a", "b"]) != P.multiset_hash(["a", "b", "b"])
    # length prefixes keep ("ab",) and ("a", "b") apart
    assert P.multiset_hash(["ab"]) != P.multiset_hash(["a", "b"])


@pytest.fixture(scope="module")
def matched():
    return P.plan_matched(LABELS, 15_979, Rng("m"))


def test_matched_plan_shape(matched):
    assert matched.steps == 400
    assert len(matched.isolated) == 400 * (48 + 76)
    assert len(matched.grouped) == 400 * (20 + 76)
    assert matched.rows_per_step("isolated") == 124 and matched.rows_per_step("grouped") == 96


def test_matched_steps_hold_the_same_tasks(matched):
    for s in range(matched.steps):
        iso = matched.step_tasks("isolated", s)
        grp = matched.step_tasks("grouped", s)
        assert Counter(iso) == Counter(grp), f"step {s}"
        assert sum(1 for p, _ in iso if p == "atomic") == 48
        assert sum(1 for p, _ in iso if p == "comp") == 76


def test_matched_grouped_rows_per_step(matched):
    per = matched.rows_per_step("grouped")
    for s in range(matched.steps):
        rows = matched.grouped[s * per:(s + 1) * per]
        groups = [idx for kind, idx in rows if kind == "group"]
        assert len(groups) == 20
        assert all(2 <= len(g) <= 4 for g in groups)
        assert all(len({LABELS[i] for i in g}) == len(g) for g in groups)


def test_matched_atomic_pool_covered_in_epochs(matched):
    def atomic(s):
        return [i for p, i in matched.step_tasks("isolated", s) if p == "atomic"]

    # 400 x 48 = 19,200 slots = one full epoch of the 10,000-task pool, then 9,200 of the next:
    # the first 208 steps (9,984 tasks) never repeat a task, and all 400 use every task.
    epoch = POOL // 48  # whole steps inside one epoch of the pool
    first = [i for s in range(epoch) for i in atomic(s)]
    assert len(set(first)) == len(first) == epoch * 48
    every = Counter(i for s in range(400) for i in atomic(s))
    assert len(every) == POOL and max(every.values()) == 2 and sum(every.values()) == 400 * 48


def test_matched_plan_deterministic():
    a = P.plan_matched(LABELS, 500, Rng("m"), steps=5)
    assert a == P.plan_matched(LABELS, 500, Rng("m"), steps=5)
    assert a != P.plan_matched(LABELS, 500, Rng("other"), steps=5)


def test_matched_impossible_grouping_is_rejected():
    with pytest.raises(P.WidthError):
        P.plan_matched(LABELS, 100, Rng("m"), steps=1, atomic_per_step=48, grouped_rows_per_step=5)
