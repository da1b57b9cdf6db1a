"""Checks before the work (issue 36 item 5): `opgen export lm-eval` judges its target first and says
what is wrong with it (never an OSError traceback); an operator set the library does not fill is
named with the library; the lm-eval export carries a metric a degenerate program cannot score on."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_model as tm
import yaml
from integration_fixtures import build
from tmpfs import mounted

from opgen.integrations import lm_eval

RETURN_X = "Assemble:\n```python\ndef main_solution(x):\n    return x\n```"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("export"))


def _export(runner, cli, build_dir: Path, out: Path):
    return runner.invoke(cli, ["export", "lm-eval", str(build_dir), str(out)])


def test_export_into_a_read_only_folder_is_a_named_error_before_any_work(runner, cli, built, tmp_path):
    with mounted(tmp_path / "ro", "1m", ro=True) as ro:
        res = _export(runner, cli, built, ro / "tasks")
        assert res.exit_code == 1, res.output
        assert f"{ro}: Read-only file system" in res.output and "nothing was written" in res.output
        assert "Traceback" not in res.output and not isinstance(res.exception, OSError)
        assert list(ro.iterdir()) == []


def test_export_refuses_a_folder_of_other_files_and_replaces_its_own_whole(runner, cli, built, tmp_path):
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    res = _export(runner, cli, built, mine)
    assert res.exit_code == 1 and "notes.txt" in res.output and "choose another --out" in res.output
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    out = tmp_path / "tasks"
    assert _export(runner, cli, built, out).exit_code == 0
    assert _export(runner, cli, built, out).exit_code == 0  # its own export: replaced whole
    assert sorted(p.name for p in out.iterdir()) == ["opgen.yaml", "opgen_test.yaml", "opgen_train.yaml", "utils.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project", "tasks"]  # no staging, no lock


@pytest.mark.slow
def test_python_m_opgen_export_into_a_read_only_folder(built, tmp_path):
    with mounted(tmp_path / "ro", "1m", ro=True) as ro:
        res = subprocess.run([sys.executable, "-m", "opgen", "export", "lm-eval", str(built), str(ro / "t")],
                             capture_output=True, text=True)
        assert res.returncode == 1 and "Read-only file system" in res.stderr and "Traceback" not in res.stderr


def test_the_export_carries_a_metric_return_x_cannot_score_on(runner, cli, built, tmp_path):
    out = tmp_path / "tasks"
    assert _export(runner, cli, built, out).exit_code == 0
    text = (out / "opgen_test.yaml").read_text()
    assert "aggregation: !function utils.non_degenerate" in text
    spec = importlib.util.spec_from_file_location("opgen_lm_eval_utils_nd", out / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    # func_21 keeps letters: on "abc" the output is the input (a degenerate row); func_3 sorts "banana"
    degenerate, plain = tm.program_row(0, "func_21(x)", "abc"), tm.program_row(1, "func_3(x)", "banana")
    got = [utils.process_results(row, [RETURN_X]) for row in (degenerate, plain)]
    assert [g["acc"] for g in got] == [1.0, 0.0]  # acc gives return x the degenerate row
    assert [g["acc_non_degenerate"] for g in got] == [[1.0, False], [0.0, True]]
    assert utils.non_degenerate([g["acc_non_degenerate"] for g in got]) == 0.0
    gold = utils.process_results(plain, [tm.ra_answer("func_3(x)")])
    assert utils.non_degenerate([gold["acc_non_degenerate"], got[0]["acc_non_degenerate"]]) == 1.0
    assert lm_eval.non_degenerate([[1.0, False]]) is None  # no counted row: no number, not 0%
    task = yaml.load(text.replace("!function ", ""), Loader=yaml.SafeLoader)
    assert [m["metric"] for m in task["metric_list"]] == ["score", "acc", "acc_non_degenerate"]


def test_an_operator_set_the_library_lacks_names_the_library(runner, cli, tmp_path):
    (tmp_path / "trainonly.yaml").write_text(
        "name: trainonly\noperators:\n"
        "  - {id: rev, gloss: reverse the string, split: train, source: \"def rev(s):\\n    return s[::-1]\\n\"}\n"
        "  - {id: up, gloss: upper-case it, split: train, source: \"def up(s):\\n    return s.upper()\\n\"}\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "r", "library": "trainonly.yaml", "defaults": {"role": "eval"}, "leakage": {"heldout_ops": None},
        "splits": {"t": {"generator": "trees", "options": {"ops": "heldout", "depths": [2], "per_depth": 2}}}}))
    res = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert (f"{recipe}: splits.t.options.ops: library 'trainonly' has no held-out operators (its sets: train (2)); "
            f"name a set it has, or a list of its operator ids") in res.output
    assert "no unary operator" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml", "trainonly.yaml"]


def test_split_stats_names_an_unusable_eval_before_reading_the_training_rows(runner, cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"  # its rows would fail only once read: they are never read
    pq.write_table(pa.table({"reward_model": [{"ground_truth": "not json"}]}), train)
    bad = tmp_path / "eval.parquet"
    bad.write_text("not parquet")
    res = runner.invoke(cli, ["split-stats", str(train), str(bad)])
    assert res.exit_code == 1 and f"{bad}: not a parquet file" in res.output, res.output
    assert "row 0" not in res.output


def test_a_push_without_room_to_stage_is_refused_before_any_copy(runner, cli, built, tmp_path, monkeypatch):
    import tempfile

    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    with mounted(tmp_path / "tmp", "1m") as small:
        monkeypatch.setattr(tempfile, "tempdir", str(small))  # TMPDIR: 1 MiB, less than a copy needs
        res = runner.invoke(cli, ["push", str(built), "--repo-id", "me/x"])
        assert res.exit_code == 1, res.output
        assert f"{small}: " in res.output and "a push stages a verified copy of the build" in res.output
        assert "nothing was uploaded" in res.output and list(small.iterdir()) == []
