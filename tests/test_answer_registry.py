"""A new answer format is one object registered in one place (opgen.formats.AnswerFormat).

The test registers throwaway formats from here — no package file knows them — and builds, validates
and grades a split of each through the ordinary library entry points, then unregisters them.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from opgen import formats as F
from opgen import validate
from opgen.build import build
from opgen.ops import STUDY, OperatorLibrary
from opgen.recipe import RecipeError, resolve
from opgen.score import grade
from opgen.score.sandbox import Sandbox


def _bare_json_gold(recall: tuple[str, ...], body: str, output: str, lib: OperatorLibrary) -> str:
    return json.dumps({"output": output}, ensure_ascii=False)


def _bare_json_check(text: str, gt: dict, lib: OperatorLibrary) -> str:
    try:
        value = json.loads(text)["output"]
    except (ValueError, KeyError, TypeError):
        return "bare_json answer is not {\"output\": ...}"
    return "" if value == gt["tasks"][0]["output"] else "bare_json value differs from the output"


def _code_only_gold(recall: tuple[str, ...], body: str, output: str, lib: OperatorLibrary) -> str:
    return "# the program\n```python\n" + body + "\n```\n# end"


def _code_only_check(text: str, gt: dict, lib: OperatorLibrary) -> str:
    if not text.startswith("# the program\n```python\n") or not text.endswith("\n```\n# end"):
        return "code_only answer is not one commented python block"
    return F.check_code(text[len("# the program\n```python\n"):-len("\n```\n# end")], gt, lib)


BARE_JSON = F.AnswerFormat("bare_json", "forward", 'Answer with the JSON object {{"output": <what {call} returns>}}.',
                           _bare_json_gold, _bare_json_check)
CODE_ONLY = F.AnswerFormat("code_only", "program", "Give one ```python block holding {entries}.",
                           _code_only_gold, _code_only_check)


@pytest.fixture
def registered():
    for spec in (BARE_JSON, CODE_ONLY):
        F.register_answer_format(spec)
    try:
        yield
    finally:
        for spec in (BARE_JSON, CODE_ONLY):
            F.unregister_answer_format(spec.name)


def _recipe(prompt_format: str, answer_format: str) -> dict:
    return {"name": "throwaway", "seed": 3, "splits": {"train": {
        "generator": "sft_cell", "role": "train", "kind": "sft", "family": "throwaway",
        "prompt_format": prompt_format, "answer_format": answer_format, "unique": "task",
        "options": {"atomic": {"pool": "sft-atomic", "per_op": 4, "ops": "all"}, "width": [1, 2],
                    "compositions": {"pool": "trainop-mixed-d2-4", "rows": 30, "ops": "train", "depths": [2, 3]}}}}}


@pytest.mark.parametrize("pf, af", [("forward", "bare_json"), ("closed_book", "code_only"), ("shown", "code_only")])
def test_a_registered_format_builds_validates_and_grades_its_gold_one(registered, tmp_path, pf, af):
    if pf == "forward":  # forward rows hold one task
        recipe_data = _recipe(pf, af)
        recipe_data["splits"]["train"]["options"]["width"] = [1, 1]
    else:
        recipe_data = _recipe(pf, af)
    recipe = resolve(recipe_data, "throwaway.yaml")
    out = tmp_path / "out"
    build([recipe], out, workers=1)
    files = sorted(out.rglob("*.parquet"))
    assert files
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert rows and all(r["extra_info"]["answer_format"] == af for r in rows)
    spec = F.answer_spec(af)
    head = spec.instruction.split("{", 1)[0]
    assert all(head in r["prompt"][0]["content"] for r in rows)
    for f in files:
        report = validate.validate_file(f)
        assert report.ok, (report.error, report.failures[:3])
    # the gold answers are this format's, and the scorer gives each 1.0
    assert all(spec.check(r["response"], json.loads(r["reward_model"]["ground_truth"]), STUDY) == "" for r in rows)
    with Sandbox(workers=2, timeout_s=5.0) as box:
        for r in rows[:40]:
            g = grade(r["reward_model"]["ground_truth"], r["response"], sandbox=box, answer_format=af,
                      assistant_prefix=r["extra_info"]["assistant_prefix"])
            assert g["score"] == 1.0, (r["response"], g)
    # validate holds the gold answers to this format's strict check: a cut one fails it
    assert spec.check(rows[0]["response"][:-1], json.loads(rows[0]["reward_model"]["ground_truth"]), STUDY) != ""


def test_registration_is_undone_and_unknown_formats_raise(registered):
    assert "code_only" in F.COMPATIBLE["closed_book"] and "code_only" not in F.COMPATIBLE["forward"]
    assert F.COMPATIBLE["closed_book"][:2] == ("ra", "prose_code")  # the defaults keep their place
    with pytest.raises(F.FormatError, match="already registered"):
        F.register_answer_format(CODE_ONLY)
    with pytest.raises(F.FormatError, match="does not go with"):
        F.Formatter("forward", "code_only")


def test_unknown_answer_formats_raise_everywhere():
    assert "bare_json" not in F.ANSWER_FORMATS and "bare_json" not in F.COMPATIBLE["forward"]
    with pytest.raises(F.FormatError, match="unknown answer format 'bare_json' .known: ra, prose_code, json_output"):
        F.answer_spec("bare_json")
    with pytest.raises(F.FormatError, match="unknown answer format"):
        F.Formatter("forward", "bare_json")
    with pytest.raises(F.FormatError, match="unknown answer format"):
        validate.check_answer("{}", "bare_json", {"tasks": []})
    with pytest.raises(ValueError, match="unknown answer format"):
        grade('{"mode": "program", "tasks": [{"entry": "main_solution", "expr": "x", "input": "a", '
              '"output": "a", "ops": [], "depth": 0}], "ops": []}', "def main_solution(x):\n    return x",
              answer_format="bare_json")
    with pytest.raises(RecipeError, match="answer_format"):
        resolve(_recipe("forward", "bare_json"), "throwaway.yaml")
