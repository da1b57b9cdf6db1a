"""Every entry point is total on hostile ground truths (issue 31, item 6): a 100,000-deep or wrongly
typed ground truth is the documented ``ValueError`` (``GroundTruthError``) in code, and a one-line
named error with exit 1 in commands; never ``RecursionError``, ``TypeError`` or a traceback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opgen.cli import cli

DEEP = "[" * 100_000 + "]" * 100_000
TASK = {"entry": "main_solution", "expr": "func_3(x)", "input": "cab", "output": "abc", "ops": ["func_3"], "depth": 1}
GOLD = "```python\ndef func_3(s):\n    return ''.join(sorted(s))\n\ndef main_solution(x):\n    return func_3(x)\n```"


def _nested(n: int) -> list:
    v: list = []
    for _ in range(n):
        v = [v]
    return v


def _truth(**change: object) -> str:
    return json.dumps({"mode": "program", "tasks": [{**TASK, **change}]})


BAD = {
    "deep text tasks": '{"tasks": ' + DEEP + "}",
    "deep text input": _truth(input="@").replace('"@"', DEEP),
    "deep text ref_output": '{"ref_output": ' + DEEP + "}",
    "deep text library": '{"tasks": [' + json.dumps(TASK) + '], "library": {"name": ' + DEEP + "}}",
    "deep object tasks": {"tasks": _nested(100_000)},
    "deep object ref_output": {"ref_output": _nested(100_000)},
    "deep object library": {"tasks": [TASK], "library": {"name": "x", "digest": _nested(100_000)}},
    "tasks null": {"tasks": None},
    "tasks a number": {"tasks": 5},
    "a task a number": {"tasks": [5]},
    "entry a number": json.loads(_truth(entry=5)),
    "expr a list": json.loads(_truth(expr=["func_3(x)"])),
    "input a list": json.loads(_truth(input=["a"])),
    "output an object": json.loads(_truth(output={"a": 1})),
    "ops a string": json.loads(_truth(ops="func_3")),
    "ops of numbers": json.loads(_truth(ops=[3])),
    "depth a string": json.loads(_truth(depth="x")),
    "depth a bool": json.loads(_truth(depth=True)),
    "mode a list": {"mode": [], "tasks": [TASK]},
    "library a path": {"tasks": [TASK], "library": "lib.yaml"},
    "library without digest": {"tasks": [TASK], "library": {"name": "x"}},
    "library digest not hex": {"tasks": [TASK], "library": {"name": "x", "digest": "../../x"}},
    "a list": [TASK],
    "a number": 5,
    "null": None,
    "not json": "{tasks",
}


def _entry(name: str, gt: object) -> object:
    from opgen import reward
    from opgen.score import grade

    extra = {"answer_format": "prose_code"}
    if name == "compute_score":
        return reward.compute_score("opgen/x", GOLD, gt, extra, allow_weak_sandbox=True)  # type: ignore[arg-type]
    if name == "compute_score_async":
        return asyncio.run(reward.compute_score_async("opgen/x", GOLD, gt, extra,  # type: ignore[arg-type]
                                                      allow_weak_sandbox=True))
    if name == "compute_score_batch":
        return reward.compute_score_batch(["opgen/x"], [GOLD], [gt], [extra], allow_weak_sandbox=True)
    return grade(gt, GOLD)  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", ["compute_score", "compute_score_async", "compute_score_batch", "grade"])
@pytest.mark.parametrize("case", list(BAD))
def test_a_hostile_ground_truth_is_the_documented_value_error(entry, case):
    from opgen.truth import GroundTruthError

    with pytest.raises(GroundTruthError) as err:
        _entry(entry, BAD[case])
    assert "ground_truth" in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("case", list(BAD))
def test_compute_score_float_scores_a_hostile_ground_truth_0_naming_it(case, capfd):
    from opgen import reward

    got = reward.compute_score_float("opgen/x", GOLD, BAD[case], {"answer_format": "prose_code"},  # type: ignore[arg-type]
                                     allow_weak_sandbox=True)
    assert got == 0.0
    err = capfd.readouterr().err
    assert "GroundTruthError" in err and "RecursionError" not in err and "TypeError" not in err, err


def test_the_contracts_ground_truths_still_grade():
    from opgen import reward

    for gt in (_truth(), {"mode": "program", "tasks": [TASK]}, {"ref_output": [[1, 2], {"a": [3]}]}):
        g = reward.compute_score("opgen/x", GOLD, gt, {"answer_format": "prose_code"}, allow_weak_sandbox=True)
        assert g["error"] in ("", "no_answer"), g
    g = reward.compute_score("opgen/x", '{"output": [[1, 2], {"a": [3]}]}', {"ref_output": [[1, 2], {"a": [3]}]},
                             allow_weak_sandbox=True)
    assert g["score"] == 1.0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small build's train and eval files, and copies of the eval file with one hostile row each."""
    import yaml

    tmp = tmp_path_factory.mktemp("totality")
    recipe = {"name": "t", "seed": 1, "leakage": {"heldout_ops": None},
              "splits": {"train": {"generator": "trees", "role": "train", "options": {"ops": "train", "depths": [1, 2],
                                                                                       "per_depth": 2}},
                         "test": {"generator": "trees", "role": "eval", "options": {"ops": "heldout",
                                                                                    "depths": [1, 2],
                                                                                    "per_depth": 2}}}}
    (tmp / "t.yaml").write_text(yaml.safe_dump(recipe))
    res = CliRunner().invoke(cli, ["build", str(tmp / "t.yaml"), "--out", str(tmp / "b"), "--workers", "1",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    table = pq.read_table(tmp / "b" / "test.parquet")
    out = {"train": tmp / "b" / "train.parquet"}
    for name, gt in (("deep", '{"mode": "program", "tasks": ' + DEEP + "}"), ("null", '{"tasks": null}'),
                     ("typed", _truth(ops="func_3"))):
        rows = table.to_pylist()
        rows[1]["reward_model"]["ground_truth"] = gt
        path = tmp / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
        out[name] = path
    (tmp / "r.jsonl").write_text("".join(json.dumps({"index": i, "response": GOLD}) + "\n" for i in range(3)))
    out["responses"] = tmp / "r.jsonl"
    return out


def _commands(files: dict[str, Path], bad: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "score": ["score", "--data", str(bad), "--responses", str(files["responses"]), "--out", str(tmp / "s"),
                  "--allow-weak-sandbox", "--no-plots"],
        "validate": ["validate", str(bad)],
        "stats": ["stats", str(bad)],
        "leakage": ["leakage", str(files["train"]), "--against", str(bad)],
        "split-stats": ["split-stats", str(files["train"]), str(bad)],
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", ["deep", "null", "typed"])
@pytest.mark.parametrize("command", ["score", "validate", "stats", "leakage", "split-stats"])
def test_a_hostile_ground_truth_is_a_named_error_in_commands(files, tmp_path, command, case):
    """A deep ground truth stops every command with one named error (exit 1). A wrongly typed one
    stops the commands that read the contract (score grades by it, validate checks it); stats,
    leakage and split-stats also count other projects' verl rows, so there it is read as any row
    is, and never a traceback."""
    args = _commands(files, files[case], tmp_path)[command]
    done = subprocess.run([sys.executable, "-m", "opgen", *args], capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert "Traceback" not in said and "RecursionError" not in said, said
    if case == "deep" or command in ("score", "validate"):
        assert done.returncode == 1, (done.returncode, said)
        assert "row 1" in said and "ground_truth" in said, said
    else:
        assert done.returncode in (0, 1), said
        assert done.returncode == 0 or ("row 1" in said and "ground_truth" in said), said


@pytest.mark.parametrize("command", ["score", "stats", "split-stats"])
def test_a_deep_ground_truth_is_one_named_error_in_process(files, tmp_path, command):
    """The fast loop's representative of the test above: the command run in this process."""
    res = CliRunner().invoke(cli, _commands(files, files["deep"], tmp_path)[command])
    assert res.exit_code == 1 and "row 1" in res.output and "nests deeper than 100" in res.output, res.output
    assert "Traceback" not in res.output
