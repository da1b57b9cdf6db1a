"""grade(): gold answers score 1, deliberately wrong ones 0, and every failure is explained."""

from __future__ import annotations

import json

import pytest

from opgen import expr as E
from opgen import ops
from opgen.score import grade
from opgen.score.sandbox import Sandbox

# ------------------------------------------------------------ rows and gold answers per docs/contracts.md


def truth(*exprs_inputs: tuple[str, str], mode: str = "program") -> dict:
    group = len(exprs_inputs) > 1
    tasks = []
    for i, (text, x) in enumerate(exprs_inputs, 1):
        tree = E.parse(text)
        with E.recursion_headroom():
            out = E.evaluate(tree, x)
        tasks.append({"entry": f"main_solution_{i}" if group else "main_solution", "expr": E.render(tree),
                      "input": x, "output": out, "ops": list(E.ops_used(tree)), "depth": E.depth(tree)})
    used = {op for t in tasks for op in t["ops"]}
    return {"mode": mode, "tasks": tasks, "ops": [o for o in ops.ALL_IDS if o in used]}


def recall_order(gt: dict) -> list[str]:
    seen: dict[str, None] = {}
    for t in gt["tasks"]:
        for op in t["ops"]:
            seen.setdefault(op, None)
    return list(seen)


def ra_answer(gt: dict, sources: dict[str, str] | None = None, think: str = "") -> str:
    """The contract's recall-then-assemble gold answer; ``sources`` overrides some definitions."""
    src = {op: ops.get(op).source for op in recall_order(gt)}
    src.update(sources or {})
    blocks = [f"Recall {op}: {ops.get(op).gloss}\n```python\n{src[op]}```\n" for op in src]
    programs = [f"def {t['entry']}(x):\n    return {t['expr']}" for t in gt["tasks"]]
    assemble = "\n".join(src.values()) + "\n" + "\n\n".join(programs) if src else "\n\n".join(programs)
    return think + "\n".join(blocks) + "\nAssemble:\n```python\n" + assemble + "\n```"


def json_answer(value: object) -> str:
    return "```json\n" + json.dumps({"output": value}) + "\n```"


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=2.0) as b:
        yield b


ARITY_24 = '''def func_24(s):
    """Backtracking palindrome."""
    if s == s[::-1]:
        return s
    return s + s[::-1]
'''

CASES = [
    ("func_3(func_1(x, 2))", "hello"),
    ("func_5(func_3(func_1(x, 2)), 'ab')", "Zebra"),
    ("func_24(func_2(x), 2)", "abcde"),
    ("func_7(func_17(x), func_13(x, '-'))", "cat"),
    ("(func_9(x) + 'lit')", "ab"),
    ("(func_10(func_0(x))).upper()", "Hello World"),
    ("func_20(func_23(x, 2), func_11(x, 3))", "xyz"),
]


@pytest.mark.parametrize("text,x", CASES)
def test_gold_ra_answer_scores_one(box, text, x):
    gt = truth((text, x))
    g = grade(gt, ra_answer(gt), sandbox=box)
    assert (g["score"], g["acc"], g["error"], g["format_ok"], g["structure_ok"]) == (1.0, 1.0, "", True, True)
    assert g["recall"]["correct"] == len(recall_order(gt)) == g["recall"]["expected"]
    assert all(r["verdict"] == "correct" for r in g["recalls"])


def test_ground_truth_as_json_text_and_think_prefix(box):
    gt = truth(("func_3(x)", "banana"))
    g = grade(json.dumps(gt), ra_answer(gt, think="<think>maybe ```python\ndef main_solution(x): 0\n```</think>\n"),
              sandbox=box)
    assert g["score"] == 1.0


@pytest.mark.parametrize("wrong", ["'HELLO'", "x", "func_3(x) + ' '"])
def test_wrong_program_scores_zero(box, wrong):
    gt = truth(("func_3(func_1(x, 2))", "hello"))
    answer = ra_answer(gt).replace("return func_3(func_1(x, 2))", f"return {wrong}")
    g = grade(gt, answer, sandbox=box)
    assert (g["score"], g["acc"], g["error"]) == (0.0, 0.0, "wrong_output")
    assert g["structure_ok"] is False


def test_value_compared_exactly_case_and_whitespace(box):
    gt = truth(("func_5(x, 'ab')", "Cd"))
    for out in ("abcd", "ABCD", "abCd ", " abCd"):
        code = f"```python\ndef main_solution(x):\n    return {out!r}\n```"
        assert grade(gt, code, sandbox=box)["score"] == 0.0
    assert grade(gt, "```python\ndef main_solution(x):\n    return 'abCd'\n```", sandbox=box)["score"] == 1.0


def test_missing_recall_is_missing_name_error(box):
    gt = truth(("func_3(func_1(x, 2))", "hello"))
    answer = ra_answer(gt)
    # Drop func_1's recall and its definition from the assembled code.
    answer = answer.replace(f"Recall func_1: {ops.get('func_1').gloss}\n```python\n{ops.get('func_1').source}```\n", "")
    answer = answer.replace(ops.get("func_1").source.rstrip("\n") + "\n\n", "")
    g = grade(gt, answer, sandbox=box)
    assert g["error"] == "missing_name" and g["score"] == 0.0
    assert g["missing"] == ["func_1"] and g["recall"]["missing"] == 1


def test_chimera_is_named(box):
    gt = truth(("func_2(func_3(x))", "banana split"))
    chimera = ops.get("func_14").source.replace("def func_14(", "def func_2(")  # duplicate chars under func_2
    g = grade(gt, ra_answer(gt, {"func_2": chimera}), sandbox=box)
    assert g["score"] == 0.0 and g["error"] == "wrong_output"
    verdicts = {r["op"]: (r["verdict"], r["chimera_of"]) for r in g["recalls"]}
    assert verdicts == {"func_2": ("chimera", "func_14"), "func_3": ("correct", "")}


def test_arity_error_func_24(box):
    gt = truth(("func_24(func_3(x), 2)", "abc"))
    g = grade(gt, ra_answer(gt, {"func_24": ARITY_24}), sandbox=box)
    assert g["error"] == "arity" and g["score"] == 0.0
    assert {r["op"]: r["verdict"] for r in g["recalls"]}["func_24"] == "arity"
    assert g["recall"]["arity"] == 1


def test_wrong_body_and_duplicate_and_extra(box):
    gt = truth(("func_3(x)", "cab"))
    wrong = "def func_3(s):\n    return s[::-1] + 'q'\n"
    answer = ra_answer(gt, {"func_3": wrong})
    answer = f"Recall func_3: again\n```python\n{wrong}```\n\nRecall func_9: extra\n```python\n" \
             f"{ops.get('func_9').source}```\n" + answer
    g = grade(gt, answer, sandbox=box)
    assert g["recalls"][0]["verdict"] == "wrong_body"
    assert g["duplicated"] == ["func_3"] and g["extra"] == ["func_9"]


def test_group_row_fraction_and_all(box):
    gt = truth(("func_3(x)", "cab"), ("func_9(x)", "ab"))
    answer = ra_answer(gt)
    assert grade(gt, answer, sandbox=box)["score"] == 1.0
    half = answer.replace("return func_9(x)", "return x")
    g = grade(gt, half, sandbox=box)
    assert (g["score"], g["acc"], g["tasks_correct"]) == (0.5, 0.0, 1)
    assert grade(gt, half, sandbox=box, group="all")["score"] == 0.0


def test_structure_policy(box):
    gt = truth(("func_3(func_3(x))", "bca"))
    same_value = ra_answer(gt).replace("return func_3(func_3(x))", "return func_3(x)")
    assert grade(gt, same_value, sandbox=box)["score"] == 1.0
    g = grade(gt, same_value, sandbox=box, policy="output_structure")
    assert g["score"] == 0.0 and g["acc"] == 1.0 and g["structure_ok"] is False


def test_last_code_block_without_ra_and_format(box):
    gt = truth(("func_3(x)", "cab"))
    prose = (f"Sorting.\n\n```python\n{ops.get('func_3').source}\n"
             "def main_solution(x):\n    return func_3(x)\n```\nDone.")
    g = grade(gt, prose, sandbox=box)
    assert g["score"] == 1.0 and g["format_ok"]
    assert grade(gt, prose, sandbox=box, answer_format="ra")["format_ok"] is False
    none = grade(gt, "I think the answer is abc.", sandbox=box)
    assert (none["score"], none["error"], none["format_ok"]) == (0.0, "no_answer", False)


def test_forward_rows():
    gt = truth(("func_3(x)", "cab"), mode="forward")
    assert grade(gt, json_answer("abc"))["score"] == 1.0
    assert grade(gt, "<think>{\"output\": \"no\"}</think> so " + json_answer("abc") + " trailing")["score"] == 1.0
    assert grade(gt, 'first {"output": "abc"} then {"output": "acb"}')["score"] == 0.0
    for bad in (json_answer("ABC"), json_answer("abc "), "abc", json_answer(["abc"])):
        assert grade(gt, bad)["score"] == 0.0
    assert grade(gt, "abc")["error"] == "no_answer"


def test_native_benchmark_rows():
    gt = {"ref_code": "def main_solution(x):\n    return x", "ref_input": {"x": "a"}, "ref_output": {"v": [1, 2]},
          "funcname": "main_solution"}
    assert grade(json.dumps(gt), json_answer({"v": [1, 2]}))["score"] == 1.0
    assert grade(gt, json_answer({"v": [1, 2.0]}))["score"] == 0.0
    assert grade({**gt, "ref_output": 1}, json_answer(True))["score"] == 0.0
    assert grade(gt, json_answer({"v": [1, 2]}), mode="program")["score"] == 1.0  # native rows are forward


def test_bad_ground_truth_and_options():
    with pytest.raises(ValueError, match="ground_truth"):
        grade("{not json", "x")
    with pytest.raises(ValueError, match="tasks\\[0\\]"):
        grade({"tasks": [{"entry": "main_solution"}]}, "x")
    with pytest.raises(ValueError, match="policy"):
        grade(truth(("func_3(x)", "a")), "x", policy="lenient")


# ------------------------------------------------------------ metrics


def test_wilson_interval_known_values():
    from opgen.score.metrics import wilson

    lo, hi = wilson(8, 10)
    assert abs(lo - 0.4902) < 1e-3 and abs(hi - 0.9433) < 1e-3
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def test_pass_at_k_is_the_unbiased_estimator():
    from math import comb

    from opgen.score.metrics import pass_at_k, pass_at_k_table

    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert abs(pass_at_k(n, c, k) - (1 - comb(n - c, k) / comb(n, k))) < 1e-12
    assert pass_at_k_table({0: [True, False, False, False], 1: [False] * 4}) == \
        {"pass@1": 0.125, "pass@2": 0.25, "pass@4": 0.5}
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_grouped_sorts_numbers_numerically():
    from opgen.score.metrics import Summary

    recs = [{"index": i, "depth": d, "acc": float(d % 2), "score": 0.0, "format_ok": True, "error": ""}
            for i, d in enumerate((10, 2, 9, 1))]
    assert list(Summary.of(recs).result(4, 4)["by_depth"]) == ["1", "2", "9", "10"]


def test_mode_forward_on_program_rows_and_program_on_forward_rows(box):
    gt = truth(("func_3(x)", "cab"))
    assert grade(gt, json_answer("abc"), mode="forward")["score"] == 1.0
    fwd = truth(("func_3(x)", "cab"), mode="forward")
    code = "```python\ndef main_solution(x):\n    return ''.join(sorted(x))\n```"
    assert grade(fwd, code, mode="program", sandbox=box)["score"] == 1.0
    assert grade(fwd, code, sandbox=box)["error"] == "no_answer"
