"""The curriculum converges to its band on a simulated learner, never leaves its ladder, drops
mastered prompts and is a function of the reward stream."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opgen import rng
from opgen.curriculum import Bucket, Curriculum, CurriculumDataset, Settings


def _fake_rows(bucket, level, seed, size):
    return [{"prompt": f"{bucket.name}-{level}-{i}", "extra_info": {"row_id": f"{bucket.name}-{level}-{i}"}}
            for i in range(100_000)]


def _pass(skill: float, level: int) -> float:
    return 1.0 / (1.0 + math.exp(level - skill))


LADDER = tuple({"depths": [d]} for d in range(1, 11))


@settings(max_examples=30)
@given(skill=st.floats(-3.0, 13.0), lo=st.floats(0.1, 0.45), start=st.integers(0, 9))
def test_converges_to_the_band_on_a_simulated_learner_and_stays_on_the_ladder(skill, lo, start):
    hi = lo + 0.4  # adjacent levels' pass rates differ by at most 0.25 < the band's width
    cur = Curriculum([Bucket("trees", "x", "s", LADDER)], Settings(band=(lo, hi), window=8, start_level=start),
                     rows_at=_fake_rows)
    levels = []
    for _ in range(60):
        level = cur.state()["buckets"]["trees"]["level"]
        for _ in range(8):
            cur.report("trees", _pass(skill, level))
        levels.append(cur.state()["buckets"]["trees"]["level"])
    assert all(0 <= v <= 9 for v in levels)
    final = levels[-1]
    assert levels[-20:] == [final] * 20  # settled
    p = _pass(skill, final)
    assert lo <= p <= hi or (final == 0 and p < lo) or (final == 9 and p > hi)


@settings(max_examples=30)
@given(skill=st.floats(-3.0, 13.0), seed=st.integers(0, 2**32))
def test_bernoulli_rewards_never_leave_the_ladder(skill, seed):
    stream = rng.Rng("learner", seed)
    cur = Curriculum([Bucket("b", "x", "s", LADDER[:4])], Settings(window=4), rows_at=_fake_rows)
    for _ in range(200):
        level = cur.state()["buckets"]["b"]["level"]
        r = 1.0 if stream.word() / 2**64 < _pass(skill, level) else 0.0
        assert 0 <= cur.report("b", r)["buckets"]["b"]["level"] <= 3


def test_mastered_prompts_are_dropped_and_never_drawn_again():
    cur = Curriculum([Bucket("b", "x", "s", LADDER[:1])], Settings(drop_after=3, drop_at=1.0, window=1000),
                     rows_at=_fake_rows)
    first = cur.next_rows(2)
    for _ in range(3):
        cur.report_rows(first, [1.0, 0.0])
    assert cur.dropped == {first[0]["extra_info"]["row_id"]}
    later = cur.next_rows(50)
    assert first[0]["extra_info"]["row_id"] not in {r["extra_info"]["row_id"] for r in later}


@pytest.mark.slow
def test_the_same_reward_stream_gives_the_same_states_and_rows():
    def run():
        log = []
        cur = Curriculum([Bucket("a", "x", "s", LADDER), Bucket("b", "x", "s", LADDER[:3])],
                         Settings(window=4), log=log.append, rows_at=_fake_rows)
        stream = rng.Rng("rewards", 7)
        seen = []
        for _ in range(40):
            rows = cur.next_rows(4)
            seen += [r["prompt"] for r in rows]
            cur.report_rows(rows, [float(stream.word() % 3 != 0) for _ in rows])
        return log, seen

    a, b = run(), run()
    assert a == b and len(a[0]) == 160  # one logged state per report
    assert len(set(a[1])) == len(a[1])  # no row twice


def test_bad_settings_and_reports_are_refused():
    with pytest.raises(ValueError, match="band"):
        Settings(band=(0.8, 0.2))
    cur = Curriculum([Bucket("b", "x", "s", LADDER)], rows_at=_fake_rows)
    with pytest.raises(KeyError, match="unknown bucket"):
        cur.report("nope", 1.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cur.report("b", 2.0)
    with pytest.raises(ValueError, match="at least one level"):
        Bucket("b", "x", "s", ())


def test_real_rows_follow_the_level_and_the_dataset_iterates():
    from integration_fixtures import RECIPE

    ladder = ({"depths": [1], "per_depth": 6}, {"depths": [3], "per_depth": 6})
    cur = Curriculum([Bucket("trees", RECIPE, "train", ladder)], Settings(window=2))
    rows = cur.next_rows(2)
    assert [r["extra_info"]["depth"] for r in rows] == [1, 1]
    cur.report_rows(rows, [1.0, 1.0])  # too easy: one rung harder
    it = iter(CurriculumDataset(cur))
    assert next(it)["extra_info"]["depth"] == 3 and cur.state()["buckets"]["trees"]["level"] == 1
