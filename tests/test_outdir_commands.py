"""One output-directory discipline for every command that writes (issue #24, items 2 and 7).

`opgen score` commits its whole report in one swap (a kill at any point leaves the old report or
the new one, never a mix, and no temp file); `build --force` never deletes a folder opgen did not
write; a mount point is refused before the work; SIGINT exits 130 and SIGTERM 143 in build, score
and eval alike. Faults are injected at named points (OPGEN_FAULT, opgen/faults.py), signals sent
to real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_model as tm
from fake_openai import FakeServer

OPGEN = [sys.executable, "-m", "opgen"]


def _run(args, env=None, **kw):
    return subprocess.run(OPGEN + args, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=300, **kw)


def _responses(path: Path, wrong: bool) -> Path:
    path.write_text("".join(json.dumps({"index": i, "response": "nope" if wrong else tm.ra_answer(e)}) + "\n"
                            for i, (e, _) in enumerate(tm.TREES)), encoding="utf-8")
    return path


def _report(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _score(data: Path, responses: Path, out: Path, env=None):
    return _run(["score", "--data", str(data), "--responses", str(responses), "--out", str(out), "--workers", "1",
                 "--no-plots", "--allow-weak-sandbox"], env=env)


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(name + ".opgen-")
                  and not p.name.endswith(".opgen-lock"))


@pytest.fixture
def scored(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    out = tmp_path / "scores"
    r = _score(data, _responses(tmp_path / "right.jsonl", wrong=False), out)
    assert r.returncode == 0, r.stderr
    return data, out


SLOW = pytest.mark.slow


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [("KILL", -9), pytest.param("INT", 130, marks=SLOW),
                                       pytest.param("TERM", 143, marks=SLOW)])
def test_a_rescore_killed_before_its_commit_leaves_the_old_report_whole(scored, tmp_path, sig, code):
    data, out = scored
    before = _report(out)
    wrong = _responses(tmp_path / "wrong.jsonl", wrong=True)
    r = _score(data, wrong, out, env={"OPGEN_FAULT": f"staged:{sig}", "OPGEN_SWAP": "rename"})
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if code > 0:
        assert ("terminated" if sig == "TERM" else "interrupted") in r.stderr and "as it was" in r.stderr
    assert _report(out) == before  # the old report, whole: no new scores.jsonl beside an old summary.csv
    # the rerun finishes what was interrupted and leaves nothing behind
    r = _score(data, wrong, out)
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["acc"] == 0.0 and summary["responses_path"] == str(wrong)
    assert sorted(_report(out)) == ["scores.jsonl", "summary.csv", "summary.json"]
    assert _leftovers(tmp_path, "scores") == []


@SLOW
@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_a_signal_during_the_swap_is_taken_after_it_and_says_so(scored, tmp_path, sig, code):
    data, out = scored
    wrong = _responses(tmp_path / "wrong.jsonl", wrong=True)
    r = _score(data, wrong, out, env={"OPGEN_FAULT": f"before-swap:{sig}", "OPGEN_SWAP": "rename"})
    assert r.returncode == code and "holds the new report" in r.stderr, r.stderr
    assert json.loads((out / "summary.json").read_text())["responses_path"] == str(wrong)
    assert sorted(_report(out)) == ["scores.jsonl", "summary.csv", "summary.json"]
    assert _leftovers(tmp_path, "scores") == []


@pytest.mark.slow
def test_a_rescore_killed_between_its_renames_is_recovered_by_the_next(scored, tmp_path):
    data, out = scored
    wrong = _responses(tmp_path / "wrong.jsonl", wrong=True)
    r = _score(data, wrong, out, env={"OPGEN_FAULT": "between-renames:KILL", "OPGEN_SWAP": "rename"})
    assert r.returncode == -9
    assert not out.exists()  # the window of the two-rename swap: the next run finishes it
    r = _score(data, wrong, out)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text())["responses_path"] == str(wrong)
    assert _leftovers(tmp_path, "scores") == []


@pytest.mark.slow
def test_score_refuses_a_folder_it_did_not_write(tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    out = tmp_path / "project"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    r = _score(data, _responses(tmp_path / "r.jsonl", wrong=False), out)
    assert r.returncode == 1 and "notes.md" in r.stderr and "opgen score does not write" in r.stderr, r.stderr
    assert [p.name for p in out.iterdir()] == ["notes.md"]


def test_build_force_never_deletes_a_project_folder(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("mine")
    (project / "src" / "main.py").write_text("print(1)")
    for extra in ([], ["--force"]):
        r = _run(["build", "native-stage1", "--out", ".", "--limit", "5", "--workers", "1", *extra], cwd=project)
        assert r.returncode == 1, r.stderr
        assert "no opgen manifest.json" in r.stderr and "pass --force" not in r.stderr, r.stderr
        assert sorted(p.name for p in project.iterdir()) == ["README.md", "src"]
        assert (project / "src" / "main.py").read_text() == "print(1)"


def test_build_into_a_mount_point_is_refused_before_the_work(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        r = _run(["build", "native-stage1", "--out", str(mnt), "--limit", "5", "--workers", "1"],
                 env={"OPGEN_FAULT": "produced:KILL"})  # a build that got to work would be killed
        assert r.returncode == 1, r.stderr
        assert "a mount point" in r.stderr and "Traceback" not in r.stderr
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_eval_exits_130_on_sigint_and_143_on_sigterm_keeping_the_written_batch(tmp_path, sig, code):
    data = tm.write_rows(tmp_path / "d.parquet", [tm.program_row(i, "func_3(x)", f"w{i}") for i in range(6)])
    out = tmp_path / "out"
    args = ["eval", "--backend", "openai", "--model", "m", "--data", str(data), "--out", str(out), "--no-score",
            "--quiet", "--max-new-tokens", "8", "--batch-size", "2"]
    with FakeServer("m") as srv:
        r = _run([*args, "--base-url", srv.url], env={"OPGEN_FAULT": f"batch-written:{sig}"})
        assert r.returncode == code, r.stderr
        assert "Traceback" not in r.stderr and "--resume" in r.stderr
        lines = (out / "m" / "d_generations.jsonl").read_text().splitlines()
        assert [json.loads(x)["index"] for x in lines] == [0, 1]
        r = _run([*args, "--base-url", srv.url, "--resume"])
        assert r.returncode == 0, r.stderr
    assert len((out / "m" / "d_generations.jsonl").read_text().splitlines()) == 6


def _tidy_table(path: Path) -> Path:
    lines = ["run,compute,split,n_correct,n_total,tokens,loss"]
    for i, run in enumerate("abcd"):
        for j, c in enumerate((1e18, 2e18, 4e18, 8e18, 1.6e19)):
            lines.append(f"{run},{c},all,{20 + 10 * j + 3 * i},200,{10 ** (9 + i)},{4 - 0.2 * i}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_fit_commits_its_report_whole_and_refuses_a_foreign_folder(runner, cli, tmp_path):
    table = _tidy_table(tmp_path / "t.csv")
    args = ["fit", "--tidy", str(table), "--resamples", "20", "--no-plots", "--out"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.md").write_text("mine")
    r = runner.invoke(cli, [*args, str(project)])
    assert r.exit_code == 1 and "opgen fit does not write" in r.output and "notes.md" in r.output, r.output
    assert [p.name for p in project.iterdir()] == ["notes.md"]
    out = tmp_path / "o"
    for _ in range(2):  # its own folder: replaced whole, nothing staged left
        r = runner.invoke(cli, [*args, str(out)])
        assert r.exit_code == 0, r.output
        assert str(out / "fit.json") in r.output
    assert {p.name for p in out.iterdir()} >= {"fit.json", "fit_runs.csv", "fit_windows.csv"}
    assert _leftovers(tmp_path, "o") == []


def test_the_api_leaves_no_lock_file_in_the_temporary_directory(tmp_path, monkeypatch):
    import tempfile

    import opgen

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    opgen.create_dataset("native-stage1", "stage1_l1_test", size=5)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_responses_file_is_an_error_not_accuracy_zero(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    r = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(empty), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "no responses" in r.output and "accuracy" not in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_eval_no_plots_draws_none(runner, cli, tmp_path):
    pytest.importorskip("matplotlib")
    data = tm.write_trees(tmp_path / "trees.parquet")
    answers = _responses(tmp_path / "answers.jsonl", wrong=False)
    args = ["eval", "--backend", "replay", "--model", str(answers), "--data", str(data), "--quiet", "--workers", "1",
            "--allow-weak-sandbox", "--out"]
    r = runner.invoke(cli, [*args, str(tmp_path / "plain")])
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "plain").rglob("*.png"))
    r = runner.invoke(cli, [*args, str(tmp_path / "none"), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert not list((tmp_path / "none").rglob("*.png")) and list((tmp_path / "none").rglob("summary.json"))
