"""The other ways verl calls a reward: batched keyword lists, a float, a coroutine; the keys policy.

Each is checked against verl's own manager code in tests/test_verl_managers.py (verl group); these
run everywhere and pin the contract itself.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from test_reward import FORWARD, PROGRAM, SAMPLES

from opgen.reward import (
    KEYS,
    MINIMAL_KEYS,
    compute_score,
    compute_score_async,
    compute_score_batch,
    compute_score_float,
)


def _columns():
    sources = [s[0] for s in SAMPLES]
    texts = [s[1] for s in SAMPLES]
    truths = [json.dumps(s[2]) for s in SAMPLES]
    extras = [{"answer_format": "ra"} for _ in SAMPLES]
    return sources, texts, truths, extras


@pytest.mark.slow
def test_batch_equals_one_call_per_sample_in_order():
    sources, texts, truths, extras = _columns()
    got = compute_score_batch(data_sources=sources, solution_strs=texts, ground_truths=truths, extra_infos=extras)
    assert got == [compute_score(*args) for args in zip(sources, texts, truths, extras)]
    assert [g["score"] for g in got] == [s[3] for s in SAMPLES]
    assert compute_score_batch(data_sources=[], solution_strs=[], ground_truths=[]) == []


def test_batch_passes_reward_kwargs_and_refuses_ragged_lists():
    sources, texts, truths, extras = _columns()
    got = compute_score_batch(sources, texts, truths, extras, keys="minimal", group="all")
    assert all(tuple(g) == MINIMAL_KEYS for g in got)
    assert got[4]["score"] == 0.0  # the half-right group row under group=all
    with pytest.raises(ValueError, match="3 solution_strs"):
        compute_score_batch(sources, texts[:3], truths, extras)
    with pytest.raises(ValueError, match="keys must be one of"):
        compute_score_batch(sources, texts, truths, extras, keys="some")


def test_float_is_the_score_and_a_bad_sample_scores_zero_alone(capsys):
    for ds, text, gt, expected in SAMPLES:
        value = compute_score_float(ds, text, json.dumps(gt))
        assert type(value) is float and value == expected
    # verl.trainer.main_eval passes no extra_info; prime passes it positionally.
    assert compute_score_float("opgen/x", SAMPLES[0][1], PROGRAM) == 1.0
    assert compute_score_float("opgen/x", SAMPLES[0][1], PROGRAM, {"answer_format": "ra"}) == 1.0
    assert compute_score_float("opgen/bad", "x", "{") == 0.0
    assert "opgen/bad: scored 0.0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="policy must be one of"):
        compute_score_float("opgen/x", "x", PROGRAM, policy="nope")


@pytest.mark.slow
def test_async_awaits_to_the_same_dict():
    async def many():
        return await asyncio.gather(*(compute_score_async(ds, text, gt, extra_info={"answer_format": "ra"})
                                      for ds, text, gt, _ in SAMPLES))

    got = asyncio.run(many())
    assert got == [compute_score(ds, text, gt, {"answer_format": "ra"}) for ds, text, gt, _ in SAMPLES]
    assert asyncio.iscoroutinefunction(compute_score_async)


def test_keys_policy_minimal_keeps_the_score_and_full_is_the_default():
    full = compute_score("d", SAMPLES[0][1], PROGRAM)
    assert tuple(full) == KEYS == tuple(compute_score("d", SAMPLES[0][1], PROGRAM, keys="full"))
    minimal = compute_score("d", SAMPLES[0][1], PROGRAM, keys="minimal")
    assert tuple(minimal) == MINIMAL_KEYS and minimal == {k: full[k] for k in MINIMAL_KEYS}
    fwd = compute_score("d", '```json\n{"output": "cab"}\n```', FORWARD, keys="minimal")
    assert tuple(fwd) == MINIMAL_KEYS and not any(math.isnan(v) for v in fwd.values())
    with pytest.raises(ValueError, match="keys must be one of full, minimal"):
        compute_score("d", "x", PROGRAM, keys="tiny")


def test_batch_keeps_the_whole_sandbox_pool_busy(monkeypatch):
    # Two samples per sandbox worker in flight at once: a barrier of that size only opens if the
    # batch really runs them concurrently (a sequential loop would time the barrier out).
    import threading

    from opgen.score.sandbox import shared

    box = shared()
    width = 2 * box.workers
    barrier = threading.Barrier(width, timeout=60)
    real = box.run_sent

    def waiting(sent):
        barrier.wait()
        return real(sent)

    monkeypatch.setattr(box, "run_sent", waiting)
    # a program the static path cannot prove: it must run
    text = "```python\ndef main_solution(x):\n    return x[::-1]\n```"
    got = compute_score_batch(["d"] * width, [text] * width, [json.dumps(PROGRAM)] * width)
    assert [g["error"] for g in got] == ["wrong_output"] * width
