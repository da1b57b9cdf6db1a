"""`opgen verify` checks everything the manifest records and says which checks ran (issue 24, item 3)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import small_builds

from opgen import manifest as M


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return small_builds.native_stage1(tmp_path_factory.mktemp("verify") / "o", limit=40)


@pytest.fixture
def out(built, tmp_path) -> Path:
    dst = tmp_path / "o"
    shutil.copytree(built, dst)
    return dst


def _edit(out: Path, fn) -> None:
    man = json.loads((out / "manifest.json").read_text())
    fn(man)
    (out / "manifest.json").write_text(M.dumps(man))


def _verify(runner, cli, out: Path, *extra: str):
    return runner.invoke(cli, ["verify", str(out), "--no-progress", *extra])


def _checks(result) -> list[dict]:
    rep = json.loads(result.stdout)
    return rep["checks"] + [c for s in rep["splits"] for c in s["checks"]]


@pytest.mark.slow
def test_a_file_re_encoded_after_the_build_fails_verify_as_validate_refuses_it(runner, cli, out):
    name = "stage1_l1_test"
    pq.write_table(pq.read_table(out / f"{name}.parquet"), out / f"{name}.parquet", compression="snappy")
    r = _verify(runner, cli, out)
    assert r.exit_code == 1, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith(f"FAIL {name}:"))
    assert "sha256" in line and "not the manifest's" in line
    assert r.output.count("bytes identical") == 1  # only the untouched split says so
    assert "Traceback" not in r.output
    assert runner.invoke(cli, ["validate", str(out), "--no-progress"]).exit_code == 1  # validate refuses it too


def test_the_files_sha256_is_checked_even_under_another_writer(runner, cli, out):
    name = "stage1_l1_test"
    pq.write_table(pq.read_table(out / f"{name}.parquet"), out / f"{name}.parquet", compression="snappy")
    _edit(out, lambda m: m["versions"].update(pyarrow="21.0.0-elsewhere"))
    r = _verify(runner, cli, out, "--json")
    assert r.exit_code == 1, r.output
    checks = {(c["scope"], c["check"]): c["status"] for c in _checks(r)}
    assert checks[(name, "files")] == "failed"
    assert checks[(name, "bytes")] == "skipped" and checks[("stage1_l1_train", "bytes")] == "skipped"
    assert checks[(name, "content")] == "passed"  # the rows are the same; their bytes are not the manifest's


def test_a_size_that_is_not_the_manifests_fails(runner, cli, out):
    _edit(out, lambda m: m["splits"]["stage1_l1_train"]["files"][0].update(bytes=12))
    r = _verify(runner, cli, out)
    assert r.exit_code == 1 and "bytes, the manifest's 12" in r.output


def test_a_top_level_seed_that_is_not_the_recipes_fails(runner, cli, out):
    _edit(out, lambda m: m.update(seed=5))
    r = _verify(runner, cli, out)
    assert r.exit_code == 1 and "FAIL manifest (seed)" in r.output


@pytest.mark.slow
def test_a_recipe_sha256_that_is_not_the_files_fails(runner, cli, out):
    _edit(out, lambda m: m["recipes"][0].update(sha256="0" * 64))
    r = _verify(runner, cli, out)
    assert r.exit_code == 1 and "FAIL recipe datasets/native-stage1.yaml (sha256)" in r.output


def test_a_recipe_file_not_found_is_reported_as_skipped(runner, cli, out):
    _edit(out, lambda m: m["recipes"][0].update(path="gone/nowhere.yaml"))
    r = _verify(runner, cli, out)
    assert r.exit_code == 0, r.output
    assert "skip recipe gone/nowhere.yaml (sha256): not compared" in r.output


def test_an_extra_file_in_the_folder_fails(runner, cli, out):
    (out / "notes.txt").write_text("mine")
    r = _verify(runner, cli, out)
    assert r.exit_code == 1 and "FAIL folder (extra files)" in r.output and "notes.txt" in r.output


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.update(splits={}), "splits"),
    (lambda m: m.update(limit="lots"), "limit"),
    (lambda m: m.update(limit=0), "limit"),
    (lambda m: m.update(recipes=None), "recipes"),
    (lambda m: m.update(recipes=[]), "recipes"),
    (lambda m: m.update(recipes=["x"]), "recipes[0]"),
    (lambda m: m.update(seed="7"), "seed"),
    (lambda m: m["splits"]["stage1_l1_train"].update(files=None), "splits.stage1_l1_train.files"),
    (lambda m: m["splits"]["stage1_l1_train"].update(rows="many"), "splits.stage1_l1_train.rows"),
    (lambda m: m["splits"]["stage1_l1_train"]["files"][0].update(sha256=None),
     "splits.stage1_l1_train.files[0].sha256"),
    (lambda m: m["splits"]["stage1_l1_train"]["files"][0].update(path="../../etc/x.parquet"),
     "splits.stage1_l1_train.files[0].path"),
    (lambda m: m["splits"]["stage1_l1_train"]["files"][0].update(bytes=-1),
     "splits.stage1_l1_train.files[0].bytes"),
    (lambda m: m["splits"]["stage1_l1_train"].update(built_with="stage1_l1_train"),
     "splits.stage1_l1_train.built_with"),
    (lambda m: m["splits"]["stage1_l1_test"].update(m["splits"]["stage1_l1_train"]),
     "splits.stage1_l1_test.files[0].path"),
])
def test_a_malformed_manifest_field_is_a_named_error(runner, cli, out, edit, field):
    _edit(out, edit)
    r = _verify(runner, cli, out)
    assert r.exit_code == 2, r.output
    assert f"field '{field}'" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_the_report_names_every_check_that_ran(runner, cli, out):
    r = _verify(runner, cli, out, "--json")
    assert r.exit_code == 0, r.output
    got = {(c["scope"], c["check"], c["status"]) for c in _checks(r)}
    build_wide = {("manifest", "fields"), ("manifest", "seed"), ("recipe datasets/native-stage1.yaml", "sha256"),
                  ("folder", "extra files")}
    per_split = {(s, c) for s in ("stage1_l1_train", "stage1_l1_test")
                 for c in ("files", "split digest", "content", "rows", "bytes")}
    assert got == {(*k, "passed") for k in build_wide | per_split}
    text = _verify(runner, cli, out).output
    assert text.count("passed: files, split digest, content, rows, bytes") == 2
    assert "14 checks passed, 0 failed, 0 skipped" in text


@pytest.mark.slow
@pytest.mark.parametrize(("command", "shown"), [("verify", ("check files", "generate")),
                                               ("validate", ("validate", "/80"))])
def test_verify_and_validate_show_progress_on_stderr_when_asked(out, command, shown):
    r = subprocess.run([sys.executable, "-m", "opgen", command, str(out), "--progress"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert all(s in r.stderr for s in shown), r.stderr
    quiet = subprocess.run([sys.executable, "-m", "opgen", command, str(out), "--no-progress"], capture_output=True,
                           text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
