"""The hash-derived RNG: pinned known answers, independence from the process and its hash seed,
ranges, rough uniformity (fixed keys, so never flaky), and the helpers' contracts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opgen.rng import LOWERCASE, Rng, key_of

# ------------------------------------------------------------------ known answers
# Computed once and pinned: any change to the key encoding, the digest or a drawing algorithm
# changes every dataset opgen builds, so it must fail here first.


def test_known_words():
    r = Rng("recipe-digest", "train", 0, 0)
    assert [r.word() for _ in range(3)] == [6472387011184698040, 15758244549056736456, 15845722078273282418]


def test_known_below():
    r = Rng("recipe-digest", "train", 0, 0)
    assert [r.below(10) for _ in range(10)] == [0, 6, 8, 8, 5, 7, 0, 4, 0, 9]


def test_known_helpers_in_sequence():
    r = Rng("kat")
    assert r.integer(-5, 5) == -5
    assert r.uniform() == 0.9278068961464561
    assert r.choice("abcdef") == "e"
    assert r.shuffled(list(range(8))) == [0, 6, 4, 3, 5, 2, 7, 1]
    assert r.sample("abcdefgh", 3) == ["e", "a", "g"]
    assert r.text(2, 6) == "ll"
    assert r.weighted("xyz", [1, 2, 3]) == "z"
    assert r.chance(0.5) is True


def test_known_key_and_derived_stream():
    assert key_of("a", 1, True, b"z").hex() == "a7bd45ffbb54ef95bfd6cb1f3d848673509424822fde3e5f4a799d7dcd4cdb7c"
    assert Rng("kat").derive("child", 3).word() == 17213004778308947332
    assert Rng("wide").below(2**100 + 7) == 479789463270424122528293965248


def test_known_counter_words_and_bulk_equality():
    import numpy as np

    from opgen.rng import GAMMA, CounterRng, counter_blocks, counter_key, mix64

    key = counter_key("recipe-digest", "train")
    assert key == int.from_bytes(key_of("recipe-digest", "train")[:8], "little")
    # SplitMix64's published first outputs for seed 0 (Vigna's splitmix64.c)
    assert mix64(GAMMA) == 0xE220A8397B1DCDAF and mix64(2 * GAMMA % 2**64) == 0x6E789E6AA1B965F4
    r = CounterRng(key, 0, 0)
    words = [r.word() for _ in range(20)]
    assert words[:3] == KNOWN_COUNTER_WORDS
    i, j = np.array([0, 5, 2**40, 123456789]), np.array([0, 3, 999, 7])
    seeds, block = counter_blocks(key, i, j)
    for n in range(4):
        single = CounterRng(key, int(i[n]), int(j[n]))
        drawn = [single.word() for _ in range(12)]
        assert block[n].tolist() == drawn[:8]
        resumed = CounterRng.resume(int(seeds[n]), tuple(block[n].tolist()), 5)
        assert [resumed.word() for _ in range(7)] == drawn[5:]
    # helpers draw through word(), so a counter stream samples like any other
    assert CounterRng(key, 1, 2).below(10) in range(10)
    assert CounterRng(key, 1, 2).text(3, 5) == CounterRng(key, 1, 2).text(3, 5)


KNOWN_COUNTER_WORDS = [16311441012714001225, 6193338566114351286, 14684837100597569107]


# ------------------------------------------------------------------ across processes

_DRAW = """
import json
from opgen.rng import Rng
r = Rng("cross", "split", 7, 0)
child = r.derive("probe", 2)
print(json.dumps([[r.word() for _ in range(9)], [r.below(1000) for _ in range(20)],
                  r.shuffled(list("abcdefghij")), child.text(5, 9), hash("opgen")]))
"""


def _draws_under(hashseed: str) -> list:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    proc = subprocess.run([sys.executable, "-c", _DRAW], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_same_draws_in_other_processes_under_any_hash_seed():
    runs = [_draws_under(seed) for seed in ("0", "1", "12345", "random")]
    # The str hash shows the processes really ran under different hash seeds.
    assert len({run[-1] for run in runs}) == len(runs)
    r = Rng("cross", "split", 7, 0)
    child = r.derive("probe", 2)
    here = [[r.word() for _ in range(9)], [r.below(1000) for _ in range(20)],
            r.shuffled(list("abcdefghij")), child.text(5, 9)]
    for run in runs:
        assert run[:-1] == here


# ------------------------------------------------------------------ keys and streams


def test_equal_keys_give_equal_streams_and_any_part_changes_it():
    base = [Rng("d", "train", 3, 0).word()]
    assert [Rng("d", "train", 3, 0).word()] == base
    for other in [("d", "train", 3, 1), ("d", "train", 4, 0), ("d", "test", 3, 0), ("e", "train", 3, 0),
                  ("d", "train", 3), ("d", "train", 3, 0, 0)]:
        assert Rng(*other).word() != base[0], other


def test_key_encoding_is_unambiguous():
    keys = [key_of("ab", "c"), key_of("a", "bc"), key_of("abc"), key_of(1), key_of("1"), key_of(True),
            key_of(b"1"), key_of(1, 2), key_of(12), key_of(), key_of(""), key_of(b"")]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("bad", [1.5, None, ["a"], ("a",), object()])
def test_key_parts_must_be_str_int_bool_bytes(bad):
    with pytest.raises(TypeError, match="rng key parts"):
        Rng("ok", bad)


def test_derive_does_not_consume_the_parent_and_streams_are_independent():
    a, b = Rng("parent"), Rng("parent")
    child = a.derive("x")
    assert a.word() == b.word()
    assert Rng("parent").derive("x").word() == Rng("parent").derive("x").word()
    words = {
        "parent": Rng("parent").word(),
        "x": Rng("parent").derive("x").word(),
        "y": Rng("parent").derive("y").word(),
        "x1": Rng("parent").derive("x", 1).word(),
        "top-level x": Rng("x").word(),
    }
    assert len(set(words.values())) == len(words)
    assert child.word() == words["x"]


def test_derived_streams_are_uncorrelated():
    # Correlation of the low bits of 4000 sibling draws: near 0 for independent streams.
    a, b = Rng("corr").derive("a"), Rng("corr").derive("b")
    xs = [a.below(2) * 2 - 1 for _ in range(4000)]
    ys = [b.below(2) * 2 - 1 for _ in range(4000)]
    assert abs(sum(x * y for x, y in zip(xs, ys))) < 4 * 4000**0.5


def test_the_stream_continues_across_digest_blocks():
    r = Rng("blocks")
    words = [r.word() for _ in range(24)]
    assert len(set(words)) == 24  # three blocks of eight, no repeated block


# ------------------------------------------------------------------ below, integer, uniform


@settings(max_examples=200)
@given(st.integers(1, 2**70), st.integers(0, 10**6))
def test_below_stays_in_range(n, i):
    r = Rng("range", i)
    assert all(0 <= r.below(n) < n for _ in range(5))


@pytest.mark.parametrize("n", [0, -1, -(2**70)])
def test_below_needs_a_positive_bound(n):
    with pytest.raises(ValueError, match="below"):
        Rng("x").below(n)


def test_below_beyond_one_word_reaches_high_values():
    r = Rng("wide-range")
    n = 2**130
    draws = [r.below(n) for _ in range(200)]
    assert all(0 <= d < n for d in draws)
    assert max(draws) > 2**128  # a one-word draw would never exceed 2**64


def test_below_one_is_always_zero_and_power_of_two_bound_is_exact():
    r = Rng("edge")
    assert {r.below(1) for _ in range(50)} == {0}
    assert all(0 <= r.below(2**64) < 2**64 for _ in range(50))


def _chi_square(counts: Counter, n: int, draws: int) -> float:
    expected = draws / n
    return sum((counts.get(k, 0) - expected) ** 2 / expected for k in range(n))


@pytest.mark.parametrize("n", [2, 3, 7, 10, 26, 100])
def test_below_is_roughly_uniform(n):
    r = Rng("uniformity", n)
    draws = 400 * n
    counts = Counter(r.below(n) for _ in range(draws))
    assert set(counts) == set(range(n))
    # df = n - 1; mean n - 1, sd sqrt(2(n - 1)): eight sd above the mean never happens by chance.
    assert _chi_square(counts, n, draws) < (n - 1) + 8 * (2 * (n - 1)) ** 0.5 + 10


def test_below_is_unbiased_for_a_bound_near_2_to_the_63():
    # With plain w % n, n = 3 * 2**62 would make the lower third of the range twice as likely.
    r = Rng("bias")
    n = 3 * 2**62
    low = sum(r.below(n) < n // 3 for _ in range(6000))
    assert abs(low - 2000) < 200


@settings(max_examples=100)
@given(st.integers(-1000, 1000), st.integers(0, 50), st.integers(0, 10**6))
def test_integer_includes_both_ends_only(lo, width, i):
    r = Rng("integer", i)
    assert all(lo <= r.integer(lo, lo + width) <= lo + width for _ in range(5))


def test_integer_reaches_both_ends_and_rejects_an_empty_range():
    r = Rng("ends")
    assert {r.integer(2, 4) for _ in range(200)} == {2, 3, 4}
    with pytest.raises(ValueError, match="empty range"):
        r.integer(3, 2)


def test_uniform_and_chance():
    r = Rng("uniform")
    us = [r.uniform() for _ in range(5000)]
    assert all(0.0 <= u < 1.0 for u in us)
    assert abs(sum(us) / len(us) - 0.5) < 0.03
    assert not any(r.chance(0.0) for _ in range(100))
    assert all(r.chance(1.0) for _ in range(100))
    assert 1300 < sum(r.chance(0.3) for _ in range(5000)) < 1700


# ------------------------------------------------------------------ choice, weighted, shuffled, sample, text


def test_choice_covers_the_sequence_and_rejects_empty():
    r = Rng("choice")
    assert {r.choice("abc") for _ in range(100)} == set("abc")
    with pytest.raises(ValueError, match="empty"):
        r.choice([])


def test_weighted_follows_the_weights_and_never_picks_zero_weight():
    r = Rng("weighted")
    counts = Counter(r.weighted("abcd", [1, 0, 3, 0]) for _ in range(4000))
    assert set(counts) == {"a", "c"}
    assert 800 < counts["a"] < 1200


@pytest.mark.parametrize(("weights", "message"), [
    ([0, 0], "positive total"), ([1], "one weight per item"), ([1, 2, 3], "one weight per item"),
    ([2, -1], "non-negative"), ([1, float("nan")], "non-negative"), ([1, float("inf")], "finite"),
])
def test_weighted_rejects_bad_weights(weights, message):
    with pytest.raises(ValueError, match=message):
        Rng("w").weighted("ab", weights)


@settings(max_examples=100)
@given(st.lists(st.integers(), max_size=30), st.integers(0, 10**6))
def test_shuffled_is_a_permutation_and_leaves_the_input_alone(items, i):
    before = list(items)
    out = Rng("shuffle", i).shuffled(items)
    assert sorted(out) == sorted(items) and items == before


def test_shuffled_reaches_every_permutation_of_three_evenly():
    r = Rng("perms")
    counts = Counter(tuple(r.shuffled("abc")) for _ in range(6000))
    assert len(counts) == 6 and all(800 < c < 1200 for c in counts.values())


@settings(max_examples=100)
@given(st.lists(st.integers(), unique=True, max_size=20), st.data())
def test_sample_draws_distinct_elements(pool, data):
    k = data.draw(st.integers(0, len(pool)))
    out = Rng("sample", len(pool), k).sample(pool, k)
    assert len(out) == k and len(set(out)) == k and set(out) <= set(pool)


@pytest.mark.parametrize("k", [-1, 4])
def test_sample_rejects_k_out_of_range(k):
    with pytest.raises(ValueError, match="cannot sample"):
        Rng("s").sample("abc", k)


@settings(max_examples=100)
@given(st.integers(0, 20), st.integers(0, 20), st.text(min_size=1, max_size=10), st.integers(0, 10**6))
def test_text_length_and_alphabet(lo, extra, alphabet, i):
    out = Rng("text", i).text(lo, lo + extra, alphabet)
    assert lo <= len(out) <= lo + extra and set(out) <= set(alphabet)


def test_text_defaults_to_lowercase_and_covers_it():
    r = Rng("letters")
    out = "".join(r.text(10, 10) for _ in range(100))
    assert set(out) == set(LOWERCASE) == set("abcdefghijklmnopqrstuvwxyz")
