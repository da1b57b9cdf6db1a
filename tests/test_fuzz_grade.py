"""Property-based fuzz over every grading entry point (issue #22): grammar-aware mutations of real
answers plus raw bytes. Whatever the text: no exception, a score in [0, 1], an error class grade()
knows, and each call returns (bounded by the grading processes' per-response budget; not timed)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_grade import ra_answer, truth

from opgen import ops
from opgen.reward import KEYS, compute_score, compute_score_async, compute_score_batch, compute_score_float
from opgen.score import batch as B
from opgen.score import grade
from opgen.score.judge import ERRORS
from opgen.score.sandbox import Sandbox

TRUTHS = [truth(("func_5(func_3(x), 'ab')", "fuzz")), truth(("func_17(func_11(x, 3))", "Zebra")),
          truth(("func_20(x, func_9(x))", "ab"), ("func_1(x, 3)", "q"))]
ANSWERS = [ra_answer(t) for t in TRUTHS]
FORWARD = [dict(t, mode="forward") for t in TRUTHS]

# Pieces of Python and of the answer formats, and of the attacks on the grader seen so far.
TOKENS = ["def ", "main_solution", "(x)", "(s, n)", ":", "\n", "\n    ", "return ", "x", "s", "'", '"', '"""',
          "+", "*", "**", ", ", "[", "]", "{", "}", "lambda x: ", "global main_solution\n", "import os\n",
          "@staticmethod\n", "```", "```python\n", "\nRecall func_3: sort\n", "\nAssemble:\n", "</think>",
          "0x" + "f" * 4_400, "9" * 5_000, "[" * 60, "(" * 60, "x" + ".a" * 300, "\x00", "\udc80", "\x0c",
          "\u2028", "\r", "\t", "func_3", "func_17", "func_9", "yield", "async ", "await ", "class ", "if x:",
          "for main_solution in [0]:\n", "f'{x}'", "k=1, ", '{"output": "', "\\", "#", "\ufeff"]


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(ANSWERS))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["insert", "delete", "duplicate", "rename", "replace"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 200)))
        if kind == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "duplicate":
            text = text[:j] + text[i:j] * draw(st.integers(1, 4)) + text[j:]
        elif kind == "rename":
            a, b = draw(st.sampled_from(ops.ALL_IDS)), draw(st.sampled_from(ops.ALL_IDS + ("x", "s", "main")))
            text = text.replace(a, b)
        else:
            text = text[:i] + draw(st.text(max_size=20)) + text[j:]
    return text


RESPONSES = st.one_of(
    mutated(),
    st.binary(max_size=400).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.text(max_size=300),
)


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=1.0) as b:
        yield b


@pytest.fixture(autouse=True, scope="module")
def _budget():
    old = B.RESPONSE_CPU_S
    B.RESPONSE_CPU_S = 1.0
    yield
    B.RESPONSE_CPU_S = old


def _ok(g: dict) -> None:
    assert 0.0 <= g["score"] <= 1.0 and g["error"] in ERRORS, g


@settings(max_examples=40)
@given(text=RESPONSES, k=st.integers(0, len(TRUTHS) - 1), forward=st.booleans())
def test_grade_is_total(box, text, k, forward):
    gt = FORWARD[k] if forward else TRUTHS[k]
    _ok(grade(gt, text, sandbox=box))
    _ok(grade(gt, text.encode("utf-8", "surrogatepass"), sandbox=box))


@settings(max_examples=15)
@given(texts=st.lists(RESPONSES, min_size=1, max_size=6), k=st.integers(0, len(TRUTHS) - 1))
def test_reward_entry_points_are_total(texts, k):
    gt = json.dumps(TRUTHS[k])
    got = compute_score_batch(["d"] * len(texts), texts, [gt] * len(texts))
    assert len(got) == len(texts)
    for r in got:
        assert set(r) == set(KEYS) and 0.0 <= r["score"] <= 1.0
    one = compute_score("d", texts[0], gt)
    assert one == got[0]
    assert compute_score_float("d", texts[0], gt) == one["score"]
    assert asyncio.run(compute_score_async("d", texts[0], gt)) == one


@settings(max_examples=4)
@given(texts=st.lists(RESPONSES, min_size=1, max_size=8))
def test_score_answers_is_total(texts):
    from opgen.api import score_answers

    rows = [{"data_source": "opgen/x", "reward_model": {"style": "rule", "ground_truth": json.dumps(TRUTHS[0])},
             "extra_info": {"answer_format": "ra"}}]
    scores = score_answers(rows, [texts], timeout_s=1.0)
    assert len(scores.records) == len(texts)
    for rec in scores.records:
        _ok(rec)
