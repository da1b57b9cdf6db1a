"""`opgen validate`: schema checks, trusted re-execution of opgen rows, sandboxed re-execution of others."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SFT_RECIPE = """\
name: v
defaults: {role: eval}
splits:
  ra:
    generator: trees
    kind: sft
    options: {ops: all, depths: [1, 3], rows: 60}
  prose:
    generator: chains
    kind: sft
    prompt_format: shown
    answer_format: prose_code
    options: {ops: train, depths: [4], rows: 30}
  fwd:
    generator: atomic
    kind: sft
    prompt_format: forward
    options: {ops: all, per_op: 2}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from opgen import build as B
    from opgen import recipe as R

    root = tmp_path_factory.mktemp("v")
    (root / "v.yaml").write_text(SFT_RECIPE)
    B.build([R.load(str(root / "v.yaml"))], root / "out")
    return root / "out"


@pytest.mark.slow
def test_every_sft_format_validates_and_gold_answers_reparse(built, runner, cli):
    result = runner.invoke(cli, ["validate", str(built)])
    assert result.exit_code == 0, result.output
    assert result.output.count("(sft)") == 3


def _rewrite(src: Path, dst: Path, row: int, edit) -> None:
    table = pq.read_table(src)
    rows = table.to_pylist()
    edit(rows[row])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), dst)


def test_a_corrupted_output_is_named_by_row(built, runner, cli, tmp_path):
    def corrupt(r):
        gt = json.loads(r["reward_model"]["ground_truth"])
        gt["tasks"][0]["output"] += "!"
        r["reward_model"]["ground_truth"] = json.dumps(gt)

    bad = tmp_path / "bad.parquet"
    _rewrite(built / "ra.parquet", bad, 17, corrupt)
    result = runner.invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "row 17: ground_truth.tasks[0]: expr gives" in result.output and "1 of 60 rows" in result.output


def test_a_tampered_gold_answer_is_named_by_row(built, runner, cli, tmp_path):
    def tamper(r):
        r["response"] = r["response"].replace("Assemble:", "Assembly:")
        r["messages"][1]["content"] = r["response"]

    bad = tmp_path / "bad.parquet"
    _rewrite(built / "ra.parquet", bad, 3, tamper)
    result = runner.invoke(cli, ["validate", "--json", str(bad)])
    assert result.exit_code == 1
    report = json.loads(result.output[: result.output.rindex("]") + 1])
    problem = "response differs from the gold answer of the answer format"
    assert report[0]["failures"] == [{"row": 3, "problem": problem}]


def test_a_wrong_schema_is_a_file_level_failure(runner, cli, tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"data_source": ["a"], "prompt": ["not a list"]}), path)
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1 and "column 'prompt' has type string" in result.output


def _native(path: Path, rows: list[tuple[str, str, str]]) -> None:
    msg = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    gts = [json.dumps({"ref_code": code, "ref_input": {"x": x}, "ref_output": out, "funcname": "main_solution"})
           for code, x, out in rows]
    table = pa.table({
        "data_source": ["codeio-forward-stage1"] * len(rows),
        "prompt": pa.array([[{"role": "user", "content": "predict"}]] * len(rows), msg),
        "ability": ["code_io"] * len(rows),
        "reward_model": [{"style": "rule", "ground_truth": g} for g in gts],
        "extra_info": [{"index": i} for i in range(len(rows))],
    })
    pq.write_table(table, path)


@pytest.mark.slow
def test_foreign_rows_run_through_the_sandbox_and_failures_are_named(runner, cli, tmp_path):
    good = "def func_3(s):\n    return ''.join(sorted(s))\n\ndef main_solution(x):\n    return func_3(x)\n"
    hostile = "def main_solution(x):\n    while True:\n        pass\n"
    path = tmp_path / "native.parquet"
    _native(path, [(good, "cba", "abc"), (good, "cba", "cab"), (hostile, "a", "a"), (good, "zz", "zz")])
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert "2 of 4 rows (foreign)" in result.output
    assert "row 1: ref_code on ref_input gives 'abc', ref_output is 'cab'" in result.output
    assert "row 2: ref_code on ref_input: timeout" in result.output


def test_a_ground_truth_without_its_tasks_is_explained_by_the_schema(built, runner, cli, tmp_path):
    def drop(r):
        gt = json.loads(r["reward_model"]["ground_truth"])
        del gt["tasks"]
        r["reward_model"]["ground_truth"] = json.dumps(gt)

    bad = tmp_path / "bad.parquet"
    _rewrite(built / "fwd.parquet", bad, 5, drop)
    result = runner.invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "row 5: ground_truth.(top level): 'tasks' is a required property" in result.output


def test_a_build_directory_is_checked_against_its_manifest(built, runner, cli, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    assert runner.invoke(cli, ["validate", str(copy)]).exit_code == 0
    table = pq.read_table(copy / "prose.parquet")
    pq.write_table(table.slice(0, 29), copy / "prose.parquet")  # valid rows, but not the built file
    result = runner.invoke(cli, ["validate", str(copy)])
    assert result.exit_code == 1 and "prose.parquet: sha256 differs from the manifest's" in result.output
