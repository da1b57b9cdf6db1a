"""Honest numbers from the scorer (issue 36 items 1, 2, 4 and score's --out): responses scored against
the data they were made for, empty roll-ups empty, intervals that count rows, the arity error the
study means, and refusals that come before any grading. Each case failed on main (29f8497): it exited
0, wrote 0.0, or graded everything before refusing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_model as tm

import opgen
from opgen.score import metrics as M
from opgen.score import report as R

OPGEN = [sys.executable, "-m", "opgen"]


def _run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([*OPGEN, *map(str, args)], capture_output=True, text=True, timeout=600)


def _lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ---------------------------------------------------------------- 1. the data the responses were made for


@pytest.mark.slow
def test_score_refuses_generations_made_for_another_data_file(tmp_path):
    from opgen.infer.base import prompt_sha256

    data = tm.write_trees(tmp_path / "trees.parquet")
    other_rows = [tm.program_row(i, *tm.TREES[(i + 1) % len(tm.TREES)]) for i in range(len(tm.TREES))]
    other = tm.write_rows(tmp_path / "other.parquet", other_rows)
    gens = _lines(tmp_path / "gens.jsonl", [
        {"index": i, "response": tm.ra_answer(tm.TREES[(i + 1) % len(tm.TREES)][0]),
         "prompt_sha256": prompt_sha256(r["prompt"])} for i, r in enumerate(other_rows)])
    r = _run("score", "--data", data, "--responses", gens, "--out", tmp_path / "out", "--no-plots")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "gens.jsonl:1: row 0 was generated for a different prompt" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    r = _run("score", "--data", other, "--responses", gens, "--out", tmp_path / "out", "--no-plots")
    assert r.returncode == 0, r.stderr
    assert "accuracy 1.0000" in r.stdout


# ---------------------------------------------------------------- 2. empty roll-ups are empty


@pytest.mark.slow
def test_an_empty_roll_up_is_null_in_the_summary_and_empty_in_the_csv(tmp_path):
    native = [{"ref_code": "def main_solution(x):\n    return x[::-1]", "ref_input": {"x": "ab"}, "ref_output": "ba",
               "funcname": "main_solution"}]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"data_source": ["codeio-forward-stage1"],
                             "reward_model": [{"style": "rule", "ground_truth": json.dumps(native[0])}]}),
                   tmp_path / "native.parquet")
    responses = _lines(tmp_path / "r.jsonl", [{"index": 0, "response": '{"output": "ba"}'}])
    r = _run("score", "--data", tmp_path / "native.parquet", "--responses", responses, "--out", tmp_path / "out",
             "--no-plots")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # no row of this file is degenerate or not, id or ood: those roll-ups hold nothing, and say so
    for table in (summary["non_degenerate"], summary["output_changed"], summary["by_scope"]["id"],
                  summary["by_scope"]["ood"], summary["structure_ok"]):
        assert table["n"] == 0 and table["acc"] is None and table["ci_low"] is None and table["ci_high"] is None
    assert summary["missing_import"]["rate"] is None
    csv_rows = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert "non_degenerate,all,0,0,,," in csv_rows and "scope,id,0,0,,," in csv_rows
    assert summary["overall"]["acc"] == 1.0


def test_metrics_scope_over_no_eval_file_is_null():
    scope = M.rollup_by_role({"probe": {"summary": {"role": {"role": "probe"}, "by_scope": {}}}})
    assert scope["total"]["n"] == 0 and scope["total"]["acc"] is None
    assert scope["left_out"] == {"probe": "probe"}


def test_score_answers_with_no_response_or_no_rows_is_an_error_naming_the_argument():
    rows = [tm.program_row(0, *tm.TREES[0])]
    with pytest.raises(ValueError, match="responses holds no response"):
        opgen.score_answers(rows, [None])
    with pytest.raises(ValueError, match="responses is empty"):
        opgen.score_answers([], [])
    with pytest.raises(TypeError, match="rows must be an opgen Dataset, a pyarrow.Table or a list of row dicts"):
        opgen.score_answers(None, ["x"])


# ---------------------------------------------------------------- 4. intervals by row, the arity the study means


@pytest.mark.slow
def test_the_default_interval_counts_rows_not_samples(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet", n=12)
    # each row's four samples agree (all right or all wrong): four samples say no more than one
    lines = [{"index": i, "responses": [tm.ra_answer(tm.TREES[i % 6][0]) if i % 2 else "no"] * 4} for i in range(12)]
    responses = _lines(tmp_path / "r.jsonl", lines)
    by = {}
    for how in ("rows", "samples"):
        r = _run("score", "--data", data, "--responses", responses, "--out", tmp_path / how, "--no-plots",
                 "--interval", how)
        assert r.returncode == 0, r.stderr
        by[how] = json.loads((tmp_path / how / "summary.json").read_text())
    rows, samples = by["rows"]["overall"], by["samples"]["overall"]
    assert rows["n"] == samples["n"] == 48 and rows["correct"] == 24
    assert (samples["ci_low"], samples["ci_high"]) == M.wilson(24, 48)  # the per-sample interval, kept
    assert (rows["ci_low"], rows["ci_high"]) == pytest.approx(M.wilson(6, 12))  # as wide as 12 rows allow
    assert by["rows"]["metric_definitions"]["interval"] == "rows"
    assert rows["by_row"] == {"rows": 12, "cc": 6 * 16, "cn": 6 * 16, "nn": 12 * 16}


def test_one_sample_per_row_keeps_the_wilson_interval(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet", n=6)
    responses = _lines(tmp_path / "r.jsonl", [{"index": i, "response": tm.ra_answer(e) if i % 3 else "no"}
                                              for i, (e, _x) in enumerate(tm.TREES)])
    summary = R.score_files(data, responses, tmp_path / "out", plots=False)
    assert (summary["overall"]["ci_low"], summary["overall"]["ci_high"]) == M.wilson(4, 6)
    assert "by_row" not in summary["overall"]


@pytest.mark.slow
def test_the_arity_error_is_a_dropped_parameter_and_an_added_one_is_counted_apart(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet", n=6)
    gold = tm.ra_answer("func_1(x, 3)")
    dropped = gold.replace("def func_1(s, n):", "def func_1(s):")
    added = gold.replace("def func_1(s, n):", "def func_1(s, n, times):")
    assert dropped != gold and added != gold
    responses = _lines(tmp_path / "r.jsonl", [{"index": 3, "responses": [dropped, added, gold]}])
    r = _run("score", "--data", data, "--responses", responses, "--out", tmp_path / "out", "--no-plots")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    f1 = summary["recall_by_op"]["func_1"]
    assert (f1["written"], f1["arity"], f1["arity_dropped"], f1["arity_added"]) == (3, 2, 1, 1)
    assert f1["arity_rate"] == pytest.approx(1 / 3)  # the study's: "drops the second parameter"
    assert f1["arity_added_rate"] == pytest.approx(1 / 3)
    cell = summary["arity_by_distance"]["func_1"]["<40"]
    assert (cell["written"], cell["arity"], cell["added"]) == (3, 1, 1)
    assert "arity_rate,func_1,3,1," in (tmp_path / "out" / "summary.csv").read_text()


def test_the_arity_detail_diagnose_writes_tells_dropped_from_added():
    from opgen.score import diagnose as D
    from opgen.score.parse import Recall
    from opgen.score.sandbox import Result

    for code, want in (("def func_1(s):\n    return s\n", "dropped"),
                       ("def func_1(s, n, extra):\n    return s\n", "added")):
        check = D.plan(Recall("func_1", "", code), "strict")  # told by its signature, or after its probes
        if not check.verdict:
            failed = [Result("exception", None, "no") for u in check.units() for _ in u.calls]
            D.conclude(check, failed, cache=False)
        assert check.verdict == "arity"
        assert M.arity_direction({"verdict": "arity", "detail": check.detail}) == want


# ---------------------------------------------------------------- --out, a deep line: refused before grading


@pytest.fixture
def never_graded(monkeypatch):
    def graded(*a, **kw):
        raise AssertionError("a response was graded before the output was checked")

    monkeypatch.setattr(R, "grade_many", graded)


def _mount(path: Path, *opts: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=4m", *opts)), "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")


@pytest.fixture
def mounts(tmp_path):
    made: list[Path] = []

    def mount(name: str, *opts: str) -> Path:
        _mount(tmp_path / name, *opts)
        made.append(tmp_path / name)
        return tmp_path / name

    yield mount
    for m in made:
        subprocess.run(["umount", "-l", str(m)], check=False)


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    data = tm.write_trees(tmp_path / "trees.parquet")
    return data, _lines(tmp_path / "r.jsonl", [{"index": i, "response": tm.ra_answer(e)}
                                                 for i, (e, _x) in enumerate(tm.TREES)])


def test_an_out_that_is_a_mount_point_is_refused_before_grading(tmp_path, mounts, never_graded):
    data, responses = _inputs(tmp_path)
    mnt = mounts("mnt")
    with pytest.raises(R.ScoreOutputError, match="a mount point") as err:
        R.score_files(data, responses, mnt, plots=False)
    from opgen.score.inputs import ScoreInputError

    assert not isinstance(err.value, ScoreInputError)  # an output error is not the input's fault
    assert list(mnt.iterdir()) == []


def test_an_out_in_a_read_only_folder_is_refused_before_grading(tmp_path, mounts, never_graded):
    data, responses = _inputs(tmp_path)
    ro = mounts("ro", "ro")
    with pytest.raises(R.ScoreOutputError, match="Read-only file system"):
        R.score_files(data, responses, ro / "report", plots=False)


def test_an_out_that_is_a_file_is_refused_before_grading(tmp_path, never_graded):
    data, responses = _inputs(tmp_path)
    (tmp_path / "report").write_text("mine")
    with pytest.raises(R.ScoreOutputError, match="not a directory"):
        R.score_files(data, responses, tmp_path / "report", plots=False)
    assert (tmp_path / "report").read_text() == "mine"


@pytest.mark.slow
def test_the_cli_refuses_a_mount_point_out_with_exit_1(tmp_path, mounts):
    data, responses = _inputs(tmp_path)
    mnt = mounts("mnt")
    r = _run("score", "--data", data, "--responses", responses, "--out", mnt, "--no-plots", "--progress")
    assert r.returncode == 1 and "a mount point" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "response" not in r.stderr.split("Error:")[0]  # no progress bar: nothing was graded


def test_a_line_nested_200000_deep_is_a_named_error(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"index": 0, "response": "x"}\n{"index": 1, "response": ' + "[" * 200_000 + "]" * 200_000
                    + "}\n", encoding="utf-8")
    r = _run("score", "--data", data, "--responses", deep, "--out", tmp_path / "out", "--no-plots")
    assert r.returncode == 1, r.stderr
    assert "deep.jsonl:2: a JSON value nested deeper than the reader allows" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_a_line_with_both_response_and_responses_is_refused(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    both = _lines(tmp_path / "both.jsonl", [{"index": 0, "response": "a", "responses": ["b"]}])
    r = _run("score", "--data", data, "--responses", both, "--out", tmp_path / "out", "--no-plots")
    assert r.returncode == 1 and "both.jsonl:1: both 'response' and 'responses'; give one of them" in r.stderr, r.stderr
