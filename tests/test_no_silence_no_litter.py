"""Silence and litter (issue 36 item 6): long commands report progress where no terminal shows a
bar; summaries read as plain English; a responses record with both 'response' and 'responses' is
refused by name; no lock file and no empty folder is left by a command that refused to start; the
API names its bad arguments and says when fewer rows came back than were asked for."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tiny_model as tm
from integration_fixtures import build
from opgen.cli import options

import opgen
import opgen.api
from opgen import taskbuild


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("litter"))


@pytest.fixture
def lines_at_once(monkeypatch):
    """Progress lines from the first moment (the 10 s of a real run would make a slow test)."""
    monkeypatch.setattr(options, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(options, "PROGRESS_EVERY_S", 0.01)


# ---------------------------------------------------------------- progress where no bar is shown


def test_validate_reports_counted_progress_lines_off_a_terminal(runner, cli, built, lines_at_once):
    res = runner.invoke(cli, ["validate", str(built)])
    assert res.exit_code == 0, res.output
    said = [line for line in res.output.splitlines() if line.startswith("opgen validate: ")]
    assert said and said[-1].startswith("opgen validate: 15/15 rows (")  # the last line: every row done
    res = runner.invoke(cli, ["validate", str(built), "--no-progress"])
    assert res.exit_code == 0 and "opgen validate:" not in res.output


@pytest.mark.parametrize("args", [["stats", "{b}"], ["split-stats", "{b}", "{b}"], ["verify", "{b}"],
                                  ["push", "{b}", "--repo-id", "me/x", "--dry-run", "{tmp}/tree"]])
def test_every_long_command_says_it_is_working(runner, cli, built, tmp_path, lines_at_once, args):
    argv = [a.format(b=built, tmp=tmp_path) for a in args]
    res = runner.invoke(cli, argv)
    assert res.exit_code == 0, res.output
    assert f"opgen {argv[0]}: working (" in res.output
    assert "working (" not in runner.invoke(cli, [*argv[:1], "--no-progress", *argv[1:]]).output


# ---------------------------------------------------------------- plain summaries


def test_validate_summaries_read_plainly(runner, cli, built, tmp_path):
    from opgen.cli.build_cmd import validation_summary

    assert validation_summary(0, 2, 1) == ("all 2 files passed validation, but the build does not match its "
                                           "manifest (1 problem, listed above)")
    assert validation_summary(1, 1, 0) == "1 of 1 file failed validation"
    assert validation_summary(1, 3, 2) == ("1 of 3 files failed validation, and the build does not match its "
                                           "manifest (2 problems, listed above)")
    copy = tmp_path / "b"
    copy.mkdir()
    for p in built.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    table = pq.read_table(copy / "test.parquet")
    pq.write_table(table, copy / "test.parquet", compression="gzip")  # the same rows, other bytes
    res = runner.invoke(cli, ["validate", str(copy), "--no-progress"])
    assert res.exit_code == 1
    assert ("Error: all 2 files passed validation, but the build does not match its manifest (1 problem, "
            "listed above)") in res.output
    assert "manifest mismatches" not in res.output


def test_push_counts_read_plainly(runner, cli, tmp_path):
    tmp = tmp_path / "one"
    recipe = {"name": "one", "seed": 0, "leakage": {"heldout_ops": None},
              "splits": {"t": {"generator": "chains", "role": "eval",
                               "options": {"ops": "train", "depths": [1], "per_depth": 1}}}}
    one = build(tmp, recipe)
    res = runner.invoke(cli, ["push", str(one), "--repo-id", "me/x", "--dry-run", str(tmp_path / "tree")])
    assert res.exit_code == 0, res.output
    assert "(1 config, 1 row)" in res.output and "1 configs" not in res.output
    assert "in 1 config." in (tmp_path / "tree" / "README.md").read_text()


# ---------------------------------------------------------------- both keys in one record


def test_a_record_with_both_response_keys_is_refused(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet", n=2)
    gold = tm.ra_answer(tm.TREES[0][0])
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"index": 0, "response": gold, "responses": ["wrong", "wrong"]}) + "\n")
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(answers), "--out", str(tmp_path / "o"),
                              "--allow-weak-sandbox", "--no-plots", "--workers", "1"])
    assert res.exit_code != 0 and f"{answers}:1: both 'response' and 'responses'; give one of them" in res.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match=r"responses\[0\]: both 'response' and 'responses' in one record"):
        opgen.score_answers(opgen.api.rows_list(pq.read_table(data)), [{"response": gold, "responses": [gold]}, None])
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(answers), "--data", str(data),
                              "--out", str(tmp_path / "e"), "--quiet", "--allow-weak-sandbox"])
    assert res.exit_code == 1 and f"{answers}:1: both 'response' and 'responses'" in res.output


# ---------------------------------------------------------------- no lock, no empty folder


def test_a_build_that_refuses_to_start_leaves_no_lock(runner, cli, tmp_path):
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    res = runner.invoke(cli, ["build", "eval-suite", "--out", str(mine), "--limit", "2"])
    assert res.exit_code == 1 and "no opgen manifest.json" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]
    res = runner.invoke(cli, ["build", "eval-suite", "--out", str(tmp_path / "ok"), "--limit", "2", "--no-progress"])
    assert res.exit_code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["ok", "project"]


def test_a_held_lock_still_refuses_a_second_writer(tmp_path):
    from opgen import outdir

    out = tmp_path / "o"
    with outdir.Lock(out, "build"):
        with pytest.raises(outdir.OutputError, match="another build"):
            with outdir.Lock(out, "build"):
                pass
        assert outdir.lock_path(out).exists()
    assert not outdir.lock_path(out).exists()
    with outdir.Lock(out, "build"):  # taken again after it was removed
        assert outdir.lock_path(out).exists()


def test_an_eval_that_fails_up_front_leaves_no_folder(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet", n=2)
    (tmp_path / "ckpt").mkdir()  # not a model: the backend cannot start (or torch is not installed)
    res = subprocess.run([sys.executable, "-m", "opgen", "eval", "--backend", "hf", "--model", str(tmp_path / "ckpt"),
                          "--data", str(data), "--out", str(tmp_path / "out"), "--quiet", "--allow-weak-sandbox"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "trees.parquet"]  # no out/, no out/ckpt/, no lock


# ---------------------------------------------------------------- the API's arguments


@pytest.mark.parametrize("splits", [5, 2.5, {"t": 1}])
def test_build_splits_names_a_splits_argument_that_is_no_list_of_names(splits):
    with pytest.raises(TypeError, match="splits must be a split name or a list of split names, got "):
        opgen.build_splits("eval-suite", splits=splits, size=1)
    with pytest.raises(TypeError, match=r"splits must be split names \(strings\), got \[5\]"):
        opgen.build_splits("eval-suite", splits=[5], size=1)


def test_create_dataset_says_how_many_rows_came_back_when_fewer_than_asked():
    recipe = {"name": "small", "seed": 0, "defaults": {"role": "eval"},
              "splits": {"t": {"generator": "chains", "options": {"ops": "train", "depths": [1, 2], "per_depth": 2}}}}
    with pytest.warns(opgen.api.FewerRows, match="size=5,000 asked, but split 't' of recipe 'small' has 4 rows: "
                                                 "4 came back"):
        ds = opgen.create_dataset(recipe, "t", size=5000)
    assert len(ds) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(opgen.create_dataset(recipe, "t", size=4)) == 4  # all that was asked: no warning


def test_the_task_builder_answers_fewer_rows_with_their_count_and_no_warning(capfd):
    """opgen serve's /tasks: the answer says how many rows came back; the server's log stays quiet."""
    recipe = {"name": "small", "seed": 0, "defaults": {"role": "eval"},
              "splits": {"t": {"generator": "chains", "options": {"ops": "train", "depths": [1, 2], "per_depth": 2}}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        header, rows = taskbuild._answer({"recipe": recipe, "split": "t", "size": 5000, "seed": 0})
    assert header == {"ok": True, "rows": 4} and len(rows) == 4
    assert "FewerRows" not in capfd.readouterr().err
