"""opgen/score/static.py: programs of library code only get the sandbox's grade without running.

Each case is graded three ways where it applies: through a sandbox that refuses to run anything
(the static path must answer alone), with the static path (real sandbox behind it), and with
``static=False`` (the sandbox runs everything); the grade dicts must be equal. Cases the static
path must not answer are checked to reach the sandbox.
"""

from __future__ import annotations

import importlib
import json

import pytest

from opgen import expr as E
from opgen import ops
from opgen.score import diagnose as D
from opgen.score import static as S
from opgen.score.sandbox import Sandbox, Unit
from opgen.score.settings import GradeSettings

G = importlib.import_module("opgen.score.judge")


class NoRun:
    """A sandbox with the default limits that must never be asked to run anything."""

    timeout_s, memory_mb, max_output, workers, level = 2.0, 512, 100_000, 1, "none"

    def __init__(self):
        self.asked = 0

    def run_units(self, units):
        self.asked += 1
        raise AssertionError("the static path should have answered")


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=2.0) as b:
        yield b


@pytest.fixture(autouse=True)
def fresh_verdicts():
    D._VERDICTS.clear()
    yield
    D._VERDICTS.clear()


def gt_of(expr: str, x: str) -> dict:
    tree = E.parse(expr)
    with E.recursion_headroom():
        try:
            out = E.evaluate(tree, x, max_len=1_000_000)
        except E.OutputTooLong:
            out = ""
    return {"mode": "program", "tasks": [{"entry": "main_solution", "expr": E.render(tree), "input": x,
                                          "output": out, "ops": list(E.ops_used(tree)), "depth": E.depth(tree)}]}


def ra(gt: dict, defs: dict[str, str] | None = None, main: str | None = None, recalls: bool = True) -> str:
    order = list(dict.fromkeys(op for t in gt["tasks"] for op in t["ops"]))
    src = {op: ops.get(op).source for op in order}
    src.update(defs or {})
    main = main or "\n\n".join(f"def {t['entry']}(x):\n    return {t['expr']}" for t in gt["tasks"])
    head = "".join(f"Recall {op}: {ops.get(op).gloss}\n```python\n{src[op]}```\n\n" for op in order) if recalls else ""
    return head + "Assemble:\n```python\n" + "\n".join(src.values()) + "\n" + main + "\n```"


def three_ways(box, gt: dict, response: str) -> dict:
    """The static-only grade; asserts it equals the sandbox's (fresh verdict caches for each)."""
    D._VERDICTS.clear()
    alone = G.grade_in_process(gt, response, sandbox=NoRun())
    D._VERDICTS.clear()
    with_box = G.grade_in_process(gt, response, sandbox=box)
    D._VERDICTS.clear()
    ran = G.grade_in_process(gt, response, sandbox=box, settings=GradeSettings(static=False))
    assert alone == with_box == ran
    return alone


def goes_to_sandbox(box, gt: dict, response: str) -> dict:
    D._VERDICTS.clear()
    with pytest.raises(AssertionError, match="static path"):
        G.grade_in_process(gt, response, sandbox=NoRun())
    D._VERDICTS.clear()
    a = G.grade_in_process(gt, response, sandbox=box)
    D._VERDICTS.clear()
    assert a == G.grade_in_process(gt, response, sandbox=box, settings=GradeSettings(static=False))
    return a


def chimera_src(body: str, name: str) -> str:
    return f"def {name}(" + ops.get(body).source.split("(", 1)[1]


# ------------------------------------------------------------------ answered without running


@pytest.mark.parametrize("expr,x", [
    ("func_5(func_3(x), 'ab')", "dcb"),
    ("func_20(func_17(x), func_0(x))", "hello world"),
    ("func_24(func_23(func_11(x, 3), 2), 2)", "abca"),
    ("(func_12(func_10(x))).upper()", "Programs"),
    ("(func_13(x, '|') + func_7(x, 'XYZ'))", "ab c"),
    ("func_19(func_18(func_8(x, 2), 3), 2)", "rotate"),
])
def test_canonical_answers_are_graded_without_running(box, expr, x):
    gt = gt_of(expr, x)
    g = three_ways(box, gt, ra(gt))
    assert g["score"] == 1.0 and g["structure_ok"] and all(r["verdict"] == "correct" for r in g["recalls"])


def test_formatting_docstrings_and_comments_do_not_matter(box):
    gt = gt_of("func_14(func_2(x))", "Hello")
    reformatted = {
        "func_14": "def func_14(s):\n    # doubled\n    return ''.join(ch * 2\n                   for ch in s)\n",
        "func_2": "def func_2(s):\n    vowels = \"aeiouAEIOU\"\n"
                  "    return ''.join(ch for ch in s if ch not in vowels)\n",
    }
    main = 'def main_solution( x ):\n    """Entry."""\n    return func_14( func_2(x) )\n'
    g = three_ways(box, gt, ra(gt, reformatted, main))
    assert g["score"] == 1.0


def test_chimera_binds_the_name_to_the_body_it_holds(box):
    gt = gt_of("func_9(func_3(x))", "bca")
    wrong = chimera_src("func_22", "func_9")  # func_9 holding func_22's body
    g = three_ways(box, gt, ra(gt, {"func_9": wrong}))
    assert g["error"] == "wrong_output"
    assert [r["verdict"] for r in g["recalls"]] == ["chimera", "correct"]
    assert g["recalls"][0]["chimera_of"] == "func_22"


def test_arity_errors_have_pythons_messages(box):
    gt = gt_of("func_1(func_3(x), 2)", "ab")
    g = three_ways(box, gt, ra(gt, main="def main_solution(x):\n    return func_1(func_3(x))"))
    assert g["error"] == "arity"
    assert g["tasks"][0]["detail"] == "TypeError: func_1() missing 1 required positional argument: 'n'"
    g = three_ways(box, gt, ra(gt, {"func_1": chimera_src("func_3", "func_1")}))  # one parameter only
    assert g["tasks"][0]["detail"] == "TypeError: func_1() takes 1 positional argument but 2 were given"
    assert g["recalls"][0]["verdict"] == "arity"


def test_missing_definitions_and_unknown_names(box):
    gt = gt_of("func_4(func_16(x))", "aab  c")
    text = ra(gt).replace(ops.get("func_16").source, "")
    g = three_ways(box, gt, text)
    assert g["error"] == "missing_name" and g["tasks"][0]["detail"] == "NameError: name 'func_16' is not defined"
    g = three_ways(box, gt, ra(gt, main="def main_solution(x):\n    return func_99(x)"))
    assert g["tasks"][0]["detail"] == "NameError: name 'func_99' is not defined"


def test_recursion_follows_the_names_the_program_bound(box):
    # func_3 holds func_17's body, which recurses through func_17: not defined here, so NameError
    gt = gt_of("func_3(x)", "abc")
    g = three_ways(box, gt, ra(gt, {"func_3": chimera_src("func_17", "func_3")}))
    assert g["tasks"][0]["detail"] == "NameError: name 'func_17' is not defined"
    # with func_17 defined as itself the recursion is the library's
    gt = gt_of("func_3(func_17(x))", "abc")
    g = three_ways(box, gt, ra(gt, {"func_3": chimera_src("func_17", "func_3")}))
    assert g["tasks"][0]["status"] == "ok"


def test_outputs_over_the_cap_and_values_of_other_types(box):
    gt = gt_of("func_1(func_1(func_1(func_1(func_1(func_1(func_1(x, 4), 4), 4), 4), 4), 4), 4)", "abcdefg")
    g = three_ways(box, gt, ra(gt))
    assert g["error"] == "output_too_large" and g["tasks"][0]["detail"] == "114688 characters > 100000"
    # an int where a string goes: func_1's body on (3, 'ab') repeats 'ab'; func_3 then fails
    gt = gt_of("func_3(x)", "ab")
    g = three_ways(box, gt, ra(gt, main="def main_solution(x):\n    return func_3(7)"))
    assert g["tasks"][0]["detail"] == "TypeError: 'int' object is not iterable"


def test_group_rows_and_the_last_definition_wins(box):
    a, b = gt_of("func_6(x, 'zz')", "q"), gt_of("func_21(x)", "a1b2")
    gt = {"mode": "program", "tasks": [dict(a["tasks"][0], entry="main_solution_1"),
                                       dict(b["tasks"][0], entry="main_solution_2")]}
    text = ra(gt, main="def main_solution_1(x):\n    return x\n\ndef main_solution_2(x):\n    return func_21(x)\n\n"
                       "def main_solution_1(x):\n    return func_6(x, 'zz')")
    g = three_ways(box, gt, text)
    assert g["score"] == 1.0 and g["tasks_correct"] == 2


# ------------------------------------------------------------------ left to the sandbox


@pytest.mark.parametrize("change", [
    {"func_3": "def func_3(sorted):\n    return ''.join(sorted(sorted))\n"},  # a renaming that captures
    {"func_3": "def func_3(s):\n    return ''.join(sorted(s, reverse=True))\n"},  # another body
    {"func_3": "import os\ndef func_3(s):\n    return ''.join(sorted(s))\n"},  # top-level code
    {"func_3": "def _k(s):\n    return sorted(s)\ndef func_3(s):\n    return ''.join(_k(s))\n"},  # a helper
    {"func_3": "@staticmethod\n" + ops.get("func_3").source},  # a decorator
    {"func_3": "def func_3(s):\n    return ''.join(sorted(s)\n"},  # a syntax error
])
def test_anything_but_library_code_goes_to_the_sandbox(box, change):
    gt = gt_of("func_9(func_3(x))", "cab")
    goes_to_sandbox(box, gt, ra(gt, change))


@pytest.mark.parametrize("main", [
    "def main_solution(x):\n    return func_19(x, 100000000)",  # 10^8 rotations: a timeout
    "def main_solution(x):\n    return func_9(func_1(x, 1000000000))",  # gigabytes: memory
    "def main_solution(x):\n    return func_9(func_17(func_1(x, 900)))",  # deep recursion
    "def main_solution(x):\n    return func_9(func_8(x, '%099999999d'))",  # a format in the wrong place
    "def main_solution(x):\n    return func_9(func_18(func_1(x, 100), 1000))",  # a loop copying 10^9 characters
    "def main_solution(x):\n    return str(func_9(x))",  # a builtin
    "def main_solution(x):\n    return func_9(x)[0]",  # not the grammar
    "def main_solution(x):\n    return func_9(x + 'a\\udc80')",  # a lone surrogate
    "def main_solution(x):\n    return main_solution(x)",
    # a shift of 2**1,000,000: every letter costs two operations on a million-bit integer (the
    # old per-character cost said 1.0 after 17-24 s of CPU where the sandbox says timeout in 2 s)
    "def main_solution(x):\n    return func_11(func_1(x, 300), HUGE)",
])
def test_limits_the_sandbox_enforces_by_time_memory_or_stack_are_not_evaluated(box, main):
    main = main.replace("HUGE", "0x1" + "0" * 250_000)  # a million-bit integer literal
    gt = gt_of("func_9(x)", "abcdefghij")
    used = ("func_19", "func_1", "func_17", "func_8", "func_18", "func_11", "func_24")
    if any(op + "(" in main for op in used):
        # only the operators used; the slow cases are checked without running them in the sandbox
        text = ra(gt, {op: ops.get(op).source for op in used}, main)
        D._VERDICTS.clear()
        with pytest.raises(AssertionError, match="static path"):
            G.grade_in_process(gt, text, sandbox=NoRun())
        return
    goes_to_sandbox(box, gt, ra(gt, main=main))


def test_costs_are_operator_facts_in_bits():
    # one home: every operator's cost bound is on the Operator (opgen/ops.py), none in static.py
    assert all(op.cost is not None for op in ops.OPERATORS)
    assert not hasattr(S, "_COSTS")
    # an integer's size counts: the same call with a million-bit shift costs far more
    small = ops.get("func_11").cost(100, 3)
    huge = ops.get("func_11").cost(100, 1 << 1_000_000)
    assert huge[1] > 100 * small[1]
    # one modulus of a huge count is cheap, and priced so
    assert ops.get("func_8").cost(100, 1 << 1_000_000)[1] < S.WORK_BUDGET
    assert ops.int_steps(5) == 1 and ops.int_steps(-(1 << 4800)) == 11


def test_a_huge_integer_argument_is_evaluated_when_its_cost_is_small(box):
    gt = gt_of("func_9(x)", "abc")
    main = "def main_solution(x):\n    return func_9(func_8(x, 0x1" + "0" * 250_000 + "))"
    text = ra(gt, {"func_8": ops.get("func_8").source}, main)
    assert three_ways(box, gt, text)["score"] == 0.0  # evaluated statically, as the sandbox grades it


def test_library_text_followed_by_an_indented_line_is_not_taken_apart(box):
    # The verbatim prefix match must not split a definition: the indented line belongs to func_3.
    gt = gt_of("func_3(x)", "cab")
    text = ra(gt, {"func_3": ops.get("func_3").source + "    return 'pwned'\n"})
    assert goes_to_sandbox(box, gt, text)["score"] == 1.0  # the first return still wins; Python decides


def test_what_python_treats_as_comment_stays_comment():
    # `\x0c` and `\u2028` inside a comment are no line breaks for Python: the definition after them
    # is comment text, so func_3 is not defined and the program fails with a NameError.
    for sep in ("\x0c", "\u2028"):
        code = f"# note{sep}def func_3(s): return s\ndef main_solution(x):\n    return func_3(x)\n"
        (r,) = S.evaluate([Unit(code, (("main_solution", ("ba",)),))], NoRun()).results
        assert (r.status, r.detail) == ("missing_name", "NameError: name 'func_3' is not defined")


def test_small_limits_or_unknown_sandboxes_turn_the_static_path_off():
    code = ops.get("func_3").source + "def main_solution(x):\n    return func_3(x)\n"
    unit = Unit(code, (("main_solution", ("ba",)),))
    assert S.evaluate([unit], NoRun()).results[0].value == "ab"
    for attr, value in (("timeout_s", 0.1), ("memory_mb", 64), ("max_output", None)):
        sb = NoRun()
        setattr(sb, attr, value)
        assert S.evaluate([unit], sb) is None
    assert S.evaluate([unit], object()) is None


def test_static_false_and_the_entry_points_reach_the_sandbox(box, tmp_path):
    from opgen.reward import compute_score

    gt = gt_of("func_3(x)", "ba")
    sb = NoRun()
    with pytest.raises(AssertionError):
        G.grade_in_process(gt, ra(gt), sandbox=sb, settings=GradeSettings(static=False))
    assert sb.asked == 1
    assert compute_score("opgen/x", ra(gt), json.dumps(gt))["score"] == 1.0
    assert compute_score("opgen/x", ra(gt), json.dumps(gt), static=False)["score"] == 1.0
    with pytest.raises(ValueError, match="static"):
        compute_score("opgen/x", ra(gt), json.dumps(gt), static="false")


def test_opgen_score_no_static(cli, runner, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    gt = gt_of("func_5(func_3(x), 'ab')", "dcb")
    data = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "opgen/x", "reward_model": {
        "style": "rule", "ground_truth": json.dumps(gt)}, "extra_info": {"answer_format": "ra"}}]), data)
    (tmp_path / "r.jsonl").write_text(json.dumps({"index": 0, "response": ra(gt)}) + "\n")
    records = []
    for extra in ((), ("--no-static",)):
        out = tmp_path / f"out{len(extra)}"
        res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"),
                                  "--out", str(out), "--no-plots", *extra])
        assert res.exit_code == 0, res.output
        assert json.loads((out / "summary.json").read_text())["static"] is (not extra)
        records.append((out / "scores.jsonl").read_text())
    assert records[0] == records[1] and json.loads(records[0])["score"] == 1.0


def test_caches_stay_bounded_whatever_names_a_program_uses():
    S._verbatim.cache_clear()
    for i in range(1500):
        name = f"func_{1000 + i}"
        code = chimera_src("func_9", name) + f"def main_solution(x):\n    return {name}(x)\n"
        (r,) = S.evaluate([Unit(code, (("main_solution", ("ab",)),))], NoRun()).results
        assert r.value == "abba"
    # one entry per operator id of the library graded (the study's 25): never one per name a program uses
    assert S._verbatim.cache_info().currsize <= len(ops.STUDY)
    assert S._code.cache_info().currsize <= 1024
