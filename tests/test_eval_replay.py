"""`opgen eval --backend replay`: the whole chain without a model — artifacts, resume, decomposed, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm

GOOD = {i for i in range(len(tm.TREES)) if i % 2 == 0}


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _wrong_answer(expression: str) -> str:
    # a well-formed RA answer whose program computes something else (outer call swapped for func_3)
    return tm.ra_answer(expression).replace(f"return {expression}", "return func_3(x) + 'wrong'")


def _responses(n: int = len(tm.TREES)) -> list[dict]:
    return [{"index": i, "response": tm.ra_answer(e) if i in GOOD else _wrong_answer(e)}
            for i, (e, _x) in enumerate(tm.TREES[:n])]


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    return tm.write_trees(tmp_path / "trees.parquet")


def _eval(runner, cli, *args: str):
    return runner.invoke(cli, ["eval", "--backend", "replay", "--quiet", *args], catch_exceptions=False)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_replay_grades_correct_answers_one_and_wrong_ones_zero(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    model_dir = tmp_path / "out" / "answers"
    scores = {r["index"]: r for r in _lines(model_dir / "trees" / "scores.jsonl")}
    assert sorted(scores) == list(range(len(tm.TREES)))
    for i, rec in scores.items():
        assert (rec["acc"], rec["score"]) == ((1.0, 1.0) if i in GOOD else (0.0, 0.0)), rec
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["data"]["trees"]["summary"]["overall"]["acc"] == pytest.approx(len(GOOD) / len(tm.TREES))
    assert (model_dir / "trees" / "summary.json").is_file() and (model_dir / "trees" / "summary.csv").is_file()
    assert f"accuracy {len(GOOD) / len(tm.TREES):.3f}" in res.output


def test_generations_file_records_every_row_in_order(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "out" / "answers" / "trees_generations.jsonl")
    assert [r["index"] for r in lines] == list(range(len(tm.TREES)))
    want = _responses()
    for rec in lines:
        assert rec["response"] == want[rec["index"]]["response"]
        assert rec["finish_reason"] == "stop"
        assert len(rec["prompt_sha256"]) == 64
    metrics = json.loads((tmp_path / "out" / "answers" / "metrics.json").read_text())
    assert metrics["data"]["trees"]["generation"]["rows"] == len(tm.TREES)
    assert metrics["sampling"]["max_new_tokens"] == 3072 and metrics["sampling"]["temperature"] == 0.0


def test_interrupted_run_resumes_without_regenerating_and_matches_an_uninterrupted_one(runner, cli, tmp_path, trees):
    full = _responses()
    src = tmp_path / "answers.jsonl"
    # the "model" dies at row 4: rows 0-3 (two batches of 2) are on disk, plus half a line of batch 3
    _write_jsonl(src, full[:4])
    out = tmp_path / "out"
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out), "--no-score",
                "--batch-size", "2")
    assert res.exit_code == 1 and "no response for row 4" in res.output
    gen = out / "answers" / "trees_generations.jsonl"
    assert [r["index"] for r in _lines(gen)] == [0, 1, 2, 3]
    assert not (out / "answers" / "metrics.json").exists()
    with open(gen, "a", encoding="utf-8") as fh:
        fh.write('{"index": 4, "response": "cut off mid-wri')

    # resumed with a source whose first rows would now answer differently: they must not be asked again
    changed = [dict(r, response="REGENERATED") if r["index"] < 4 else r for r in full]
    _write_jsonl(src, changed)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out), "--no-score",
                "--batch-size", "2", "--resume")
    assert res.exit_code == 0, res.output
    resumed = gen.read_bytes()
    assert b"REGENERATED" not in resumed
    assert [r["response"] for r in _lines(gen)] == [r["response"] for r in full]
    run = json.loads((out / "answers" / "metrics.json").read_text())["data"]["trees"]["run"]
    assert (run["skipped"], run["generated"]) == (4, 2)

    # byte-identical to an uninterrupted run over the same answers
    _write_jsonl(src, full)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "fresh"),
                "--no-score")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fresh" / "answers" / "trees_generations.jsonl").read_bytes() == resumed


def test_without_resume_an_old_generations_file_is_replaced(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    args = ["--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score"]
    assert _eval(runner, cli, *args).exit_code == 0
    gen = tmp_path / "out" / "answers" / "trees_generations.jsonl"
    first = gen.read_bytes()
    assert _eval(runner, cli, *args).exit_code == 0
    assert gen.read_bytes() == first


def test_resume_refuses_generations_made_for_other_prompts(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    out = tmp_path / "out"
    assert _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out), "--no-score",
                 "--limit", "3").exit_code == 0
    # same file name, different rows
    rows = [tm.program_row(i, "func_3(x)", f"other{i}") for i in range(len(tm.TREES))]
    tm.write_rows(trees, rows)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out), "--no-score", "--resume")
    assert res.exit_code == 1
    assert "row 0 was generated for a different prompt" in res.output


def test_resume_refuses_other_sampling_settings(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    base = ["--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score"]
    assert _eval(runner, cli, *base, "--limit", "2").exit_code == 0
    res = _eval(runner, cli, *base, "--resume", "--max-new-tokens", "64")
    assert res.exit_code == 1 and "sampling" in res.output


def test_limit_generates_only_the_first_rows(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"),
                "--no-score", "--limit", "2")
    assert res.exit_code == 0, res.output
    assert [r["index"] for r in _lines(tmp_path / "out" / "answers" / "trees_generations.jsonl")] == [0, 1]


def test_truncated_generations_are_counted(runner, cli, tmp_path, trees):
    recs = _responses()
    recs[1]["finish_reason"] = "length"
    recs[2]["finish_reason"] = "length"
    src = _write_jsonl(tmp_path / "answers.jsonl", recs)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 0, res.output
    assert "2 truncated" in res.output
    gen = json.loads((tmp_path / "out" / "answers" / "metrics.json").read_text())["data"]["trees"]["generation"]
    assert (gen["truncated_rows"], gen["truncated_samples"]) == (2, 2)
    assert gen["truncated_rate"] == pytest.approx(2 / len(tm.TREES))


def test_several_samples_per_row(runner, cli, tmp_path, trees):
    recs = [{"index": r["index"], "responses": [r["response"], "second"]} for r in _responses()]
    src = _write_jsonl(tmp_path / "answers.jsonl", recs)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"),
                "--no-score", "--n", "2")
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "out" / "answers" / "trees_generations.jsonl")
    assert all(len(r["responses"]) == 2 and r["responses"][1] == "second" for r in lines)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "o3"),
                "--no-score", "--n", "3")
    assert res.exit_code == 1 and "--n asks for 3" in res.output


def _recall_text(op: str, source: str | None = None) -> str:
    from opgen import ops

    return f" {ops.get(op).gloss}\n```python\n{source or ops.get(op).source}```"


@pytest.mark.slow
def test_decomposed_assembles_recalled_definitions_into_the_gold_answer(runner, cli, tmp_path, trees):
    from opgen import expr, ops

    replay = tmp_path / "replay"
    replay.mkdir()
    _write_jsonl(replay / "trees_generations.jsonl", _responses())
    dec = []
    for i, (e, _x) in enumerate(tm.TREES):
        used = expr.ops_used(expr.parse(e))
        recalls = [{"op": op, "response": _recall_text(op)} for op in used]
        if i == 1:  # func_1's name recalled with func_3's one-parameter body: an arity error
            recalls[0]["response"] = _recall_text("func_1", ops.get("func_3").source.replace("func_3", "func_1"))
        dec.append({"index": i, "recalls": recalls})
    _write_jsonl(replay / "trees_decomposed_generations.jsonl", dec)
    out = tmp_path / "out"
    res = _eval(runner, cli, "--model", str(replay), "--data", str(trees), "--out", str(out), "--decomposed")
    assert res.exit_code == 0, res.output
    # graded like any answer: every assembled program is right except the one built on the bad recall
    scores = {r["index"]: r for r in _lines(out / "replay" / "trees_decomposed" / "scores.jsonl")}
    assert {i: r["acc"] for i, r in scores.items()} == {i: float(i != 1) for i in range(len(tm.TREES))}
    assert [rc["verdict"] for rc in scores[1]["recalls"]] == ["arity", "correct"]
    lines = _lines(out / "replay" / "trees_decomposed_generations.jsonl")
    for rec in lines:
        e = tm.TREES[rec["index"]][0]
        assert [r["op"] for r in rec["recalls"]] == list(expr.ops_used(expr.parse(e)))
        if rec["index"] == 1:
            assert rec["response"] != tm.ra_answer(e) and "def func_1(s):" in rec["response"]
        else:
            assert rec["response"] == tm.ra_answer(e)
    metrics = json.loads((out / "replay" / "metrics.json").read_text())
    assert metrics["data"]["trees"]["decomposed"]["run"]["requests"] == sum(
        len(expr.ops_used(expr.parse(e))) for e, _ in tm.TREES)


def test_decomposed_skips_files_without_program_tasks(runner, cli, tmp_path):
    rows = [tm.program_row(0, "func_3(x)", "ab")]
    gt = json.loads(rows[0]["reward_model"]["ground_truth"])
    rows[0]["reward_model"]["ground_truth"] = json.dumps(dict(gt, mode="forward"))
    data = tm.write_rows(tmp_path / "fwd.parquet", rows)
    src = _write_jsonl(tmp_path / "a.jsonl", [{"index": 0, "response": "x"}])
    res = _eval(runner, cli, "--model", str(src), "--data", str(data), "--out", str(tmp_path / "out"),
                "--decomposed", "--no-score")
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "out" / "a" / "metrics.json").read_text())
    assert "program rows" in metrics["data"]["fwd"]["decomposed"]["skipped"]


def test_bad_data_file_is_a_usage_error_naming_it(runner, cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"prompt": ["just a string"]}), bad)
    src = _write_jsonl(tmp_path / "a.jsonl", [{"index": 0, "response": "x"}])
    res = _eval(runner, cli, "--model", str(src), "--data", str(bad), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 2
    assert "bad.parquet" in res.output and "reward_model" in res.output


def test_bad_replay_line_names_file_and_line(runner, cli, tmp_path, trees):
    src = tmp_path / "a.jsonl"
    src.write_text('{"index": 0, "response": "x"}\n{"response": "no index"}\n', encoding="utf-8")
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 1
    assert "a.jsonl:2" in res.output and "index" in res.output


def test_replayed_prompt_hash_must_match_the_data(runner, cli, tmp_path, trees):
    recs = _responses()
    recs[2]["prompt_sha256"] = "0" * 64
    src = _write_jsonl(tmp_path / "a.jsonl", recs)
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 1 and "row 2 was generated for a different prompt" in res.output


def test_models_with_the_same_folder_name_get_distinct_outputs(runner, cli, tmp_path, trees):
    for run in ("run1", "run2"):
        (tmp_path / run / "step10").mkdir(parents=True)
        _write_jsonl(tmp_path / run / "step10" / "trees_generations.jsonl", _responses())
    res = _eval(runner, cli, "--model", str(tmp_path / "run1" / "step10"), "--model", str(tmp_path / "run2" / "step10"),
                "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "run1_step10" / "metrics.json").exists()
    assert (tmp_path / "out" / "run2_step10" / "metrics.json").exists()


def test_decomposed_needs_one_sample(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "a.jsonl", _responses())
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(tmp_path / "o"),
                "--decomposed", "--n", "2", "--no-score")
    assert res.exit_code == 2 and "--n 1" in res.output


def test_progress_reports_rows_per_second(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "a.jsonl", _responses())
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(src), "--data", str(trees),
                              "--out", str(tmp_path / "o"), "--no-score", "--progress"])  # stderr is no terminal
    assert res.exit_code == 0
    assert "row/s" in res.stderr and "truncated=0" in res.stderr


def test_unreadable_ground_truth_fails_scoring_with_the_row_named(runner, cli, tmp_path):
    rows = [tm.program_row(i, "func_3(x)", "ab") for i in range(2)]
    rows[1]["reward_model"]["ground_truth"] = "not json"
    data = tm.write_rows(tmp_path / "broken.parquet", rows)
    src = _write_jsonl(tmp_path / "a.jsonl", [{"index": i, "response": "x"} for i in range(2)])
    res = _eval(runner, cli, "--model", str(src), "--data", str(data), "--out", str(tmp_path / "out"))
    assert res.exit_code == 1
    assert "scoring failed" in res.output and "row 1" in res.output
    assert not (tmp_path / "out" / "a" / "metrics.json").exists()


@pytest.mark.slow
def test_resume_with_a_smaller_limit_grades_only_the_limited_rows(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    out = tmp_path / "out"
    assert _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out)).exit_code == 0
    res = _eval(runner, cli, "--model", str(src), "--data", str(trees), "--out", str(out), "--resume", "--limit", "2")
    assert res.exit_code == 0, res.output
    assert len(_lines(out / "answers" / "trees_generations.jsonl")) == len(tm.TREES)  # nothing thrown away
    assert [r["index"] for r in _lines(out / "answers" / "trees" / "scores.jsonl")] == [0, 1]
    summary = json.loads((out / "answers" / "metrics.json").read_text())["data"]["trees"]["summary"]
    assert summary["overall"]["n"] == 2 and summary["responses"].endswith("trees_generations.jsonl")
    assert not list((out / "answers").glob(".trees_generations.jsonl.*"))


def test_resume_refuses_a_generations_file_damaged_before_its_last_line(runner, cli, tmp_path, trees):
    src = _write_jsonl(tmp_path / "answers.jsonl", _responses())
    out = tmp_path / "out"
    base = ["--model", str(src), "--data", str(trees), "--out", str(out), "--no-score"]
    assert _eval(runner, cli, *base, "--limit", "3").exit_code == 0
    gen = out / "answers" / "trees_generations.jsonl"
    lines = gen.read_text(encoding="utf-8").splitlines(keepends=True)
    gen.write_text(lines[0] + "{broken\n" + lines[2], encoding="utf-8")
    res = _eval(runner, cli, *base, "--resume")
    assert res.exit_code == 1 and "trees_generations.jsonl:2" in res.output
    assert gen.read_text(encoding="utf-8") == lines[0] + "{broken\n" + lines[2]  # left as found
