"""Messages, not tracebacks: full disks, read-only targets, corrupt and foreign files, replay data (issue 13, 6-8).

Full and read-only file systems are small tmpfs mounts (tests/tmpfs.py: root only; skipped where ``mount`` fails).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiny_model as tm
from tmpfs import mounted


def _fill(root: Path, leave: int = 0) -> None:
    """Fill a file system, leaving ``leave`` bytes at most."""
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    with open(root / ".filler", "wb") as fh:
        try:
            fh.write(b"\0" * max(0, free - leave))
        except OSError:
            pass


def _responses(path: Path, n: int = len(tm.TREES), **extra) -> Path:
    path.write_text("".join(json.dumps({"index": i, "response": tm.ra_answer(e), **extra}) + "\n"
                            for i, (e, _) in enumerate(tm.TREES[:n])), encoding="utf-8")
    return path


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    return tm.write_trees(tmp_path / "trees.parquet")


def _no_traceback(result) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


# ---------------------------------------------------------------- full disks and read-only targets


def test_build_checks_free_space_up_front(runner, cli, tmp_path):
    with mounted(tmp_path / "fs", "2m") as fs:
        out = fs / "o"
        r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--workers", "1"])
        assert r.exit_code == 1 and "free" in r.output and "needs about" in r.output, r.output
        _no_traceback(r)
        assert sorted(p.name for p in fs.iterdir()) == []  # not even the lock


@pytest.mark.slow
def test_a_build_that_runs_out_of_space_leaves_nothing(runner, cli, tmp_path, monkeypatch):
    from opgen import outdir

    monkeypatch.setattr(outdir, "check_space", lambda out, estimate: None)  # as if the estimate were wrong
    with mounted(tmp_path / "fs", "1m") as fs:
        out = fs / "o"
        r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--workers", "1"])
        assert r.exit_code == 1 and "No space left on device" in r.output, r.output
        _no_traceback(r)
        assert sorted(p.name for p in fs.iterdir()) == []  # not even the lock


def test_build_into_a_read_only_place_is_a_message(runner, cli, tmp_path):
    with mounted(tmp_path / "fs", "1m", ro=True) as fs:
        r = runner.invoke(cli, ["build", "native-stage1", "--out", str(fs / "o"), "--limit", "5"])
        assert r.exit_code == 1 and ("not writable" in r.output or "Read-only" in r.output), r.output
        _no_traceback(r)


@pytest.mark.parametrize("ro", [False, True])
def test_score_into_a_full_or_read_only_folder_leaves_no_report(runner, cli, tmp_path, trees, ro):
    answers = _responses(tmp_path / "a.jsonl")
    with mounted(tmp_path / "fs", "1m", ro=ro) as fs:
        if not ro:
            (fs / "out").mkdir()
            _fill(fs, leave=100)
        r = runner.invoke(cli, ["score", "--data", str(trees), "--responses", str(answers), "--out", str(fs / "out"),
                                "--no-plots"])
        assert r.exit_code == 1, r.output
        assert ("No space left" in r.output) or ("Read-only" in r.output), r.output
        _no_traceback(r)
        left = sorted(p.name for p in (fs / "out").iterdir()) if (fs / "out").exists() else []
        assert left == []  # neither scores.jsonl nor its temporary file


def test_eval_into_a_full_folder_is_a_message(runner, cli, tmp_path, trees):
    answers = _responses(tmp_path / "a.jsonl")
    with mounted(tmp_path / "fs", "1m") as fs:
        _fill(fs, leave=100)
        r = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(answers), "--data", str(trees),
                                "--out", str(fs / "out")])
        assert r.exit_code == 1 and "No space left" in r.output, r.output
        _no_traceback(r)
        assert not list((fs / "out").rglob("metrics.json"))


@pytest.mark.slow
@pytest.mark.parametrize("ro", [False, True])
def test_push_dry_run_into_a_full_or_read_only_place_writes_nothing(runner, cli, tmp_path, ro):
    build = tmp_path / "b"
    assert runner.invoke(cli, ["build", "native-stage1", "--out", str(build), "--limit", "200"]).exit_code == 0
    with mounted(tmp_path / "fs", "1m", ro=ro) as fs:
        if not ro:
            _fill(fs, leave=1000)
        r = runner.invoke(cli, ["push", str(build), "--repo-id", "me/x", "--dry-run", str(fs / "tree")])
        assert r.exit_code == 1 and "nothing was written" in r.output, r.output
        _no_traceback(r)
        # nothing is left, not even the lock (opgen/outdir.py removes it as it lets go)
        assert not (fs / "tree").exists() and not [p for p in fs.iterdir() if p.name != ".filler"]


def test_leakage_report_into_a_read_only_place_is_refused_before_the_check(runner, cli, tmp_path, trees):
    with mounted(tmp_path / "fs", "1m", ro=True) as fs:
        r = runner.invoke(cli, ["leakage", str(trees), "--against", str(trees), "--report", str(fs / "r.json"),
                                "--progress"])
        assert r.exit_code == 2 and "--report" in r.output and "Read-only" in r.output, r.output
        assert "leakage: read" not in r.output  # refused before any file was read
        _no_traceback(r)


# ---------------------------------------------------------------- corrupt and foreign files


@pytest.mark.slow
def test_validate_reports_a_corrupt_file_and_goes_on(runner, cli, tmp_path):
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "3000"]).exit_code == 0
    loose = tmp_path / "loose"
    loose.mkdir()
    good, bad = loose / "good.parquet", loose / "bad.parquet"
    good.write_bytes((out / "stage1_l1_test.parquet").read_bytes())
    data = bytearray((out / "stage1_l1_train.parquet").read_bytes())
    mid = len(data) // 2
    data[mid: mid + 4096] = b"\xff" * 4096  # a data page, footer intact
    bad.write_bytes(bytes(data))
    (loose / "junk.parquet").write_bytes(b"not parquet at all")
    r = runner.invoke(cli, ["validate", str(loose)])
    assert r.exit_code == 1, r.output
    _no_traceback(r)
    assert f"ok   {good}" in r.output and f"FAIL {bad}" in r.output and f"FAIL {loose / 'junk.parquet'}" in r.output


def _foreign(path: Path, gt: list) -> Path:
    table = pa.table({
        "data_source": ["gsm8k"] * len(gt),
        "prompt": [[{"role": "user", "content": "2+2?"}]] * len(gt),
        "ability": ["math"] * len(gt),
        "reward_model": [{"style": "rule", "ground_truth": g} for g in gt],
        "extra_info": [{"split": "train", "index": i} for i in range(len(gt))],
    })
    pq.write_table(table, path)
    return path


def test_stats_reads_another_projects_verl_rows(runner, cli, tmp_path):
    path = _foreign(tmp_path / "gsm8k.parquet", ["4", "not json {", '{"answer": 7}'])
    r = runner.invoke(cli, ["stats", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["rows"] == 3
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    r = runner.invoke(cli, ["stats", str(tmp_path / "other.parquet"), str(path)])
    assert r.exit_code == 1 and "other.parquet" in r.output and "not verl rows" in r.output
    _no_traceback(r)


# ---------------------------------------------------------------- replay answers tied to their data


def _eval(runner, cli, tmp_path, *args):
    return runner.invoke(cli, ["eval", "--backend", "replay", "--out", str(tmp_path / "out"), *args])


def test_one_responses_file_is_not_graded_against_several_data_files(runner, cli, tmp_path, trees):
    other = tm.write_trees(tmp_path / "more.parquet")
    r = _eval(runner, cli, tmp_path, "--model", str(_responses(tmp_path / "a.jsonl")), "--data", str(trees),
              "--data", str(other))
    assert r.exit_code == 1 and "one responses file" in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_replay_refuses_indices_past_the_data_and_foreign_prompts(runner, cli, tmp_path, trees):
    src = _responses(tmp_path / "a.jsonl")
    with open(src, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"index": len(tm.TREES) + 5, "response": "x"}) + "\n")
    r = _eval(runner, cli, tmp_path, "--model", str(src), "--data", str(trees), "--limit", "2")
    assert r.exit_code == 1 and "made for other data" in r.output, r.output
    src = _responses(tmp_path / "b.jsonl", prompt_sha256="0" * 64)
    r = _eval(runner, cli, tmp_path, "--model", str(src), "--data", str(trees))
    assert r.exit_code == 1 and "different prompt" in r.output
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_replay_refuses_empty_parquet_and_non_utf8_sources(runner, cli, tmp_path, trees):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bytes.jsonl").write_bytes(b'{"index": 0, "response": "\xff"}\n')
    for src, words in ((tmp_path / "empty.jsonl", "holds no responses"), (trees, "is a parquet file"),
                       (tmp_path / "bytes.jsonl", "bytes.jsonl:1: not UTF-8")):
        r = _eval(runner, cli, tmp_path, "--model", str(src), "--data", str(trees))
        assert r.exit_code == 1 and words in r.output, (src, r.output)
        _no_traceback(r)
    assert not (tmp_path / "out").exists()


def test_decomposed_replay_without_recalls_fails_before_the_normal_pass(runner, cli, tmp_path, trees):
    r = _eval(runner, cli, tmp_path, "--model", str(_responses(tmp_path / "a.jsonl")), "--data", str(trees),
              "--decomposed")
    assert r.exit_code == 1 and "--decomposed needs recall answers" in r.output, r.output
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- small ones


@pytest.mark.slow
def test_eval_outputs_respect_the_umask_and_draw_no_bars_off_a_terminal(runner, cli, tmp_path, trees):
    old = os.umask(0o022)
    try:
        r = _eval(runner, cli, tmp_path, "--model", str(_responses(tmp_path / "a.jsonl")), "--data", str(trees),
                  "--model", str(_responses(tmp_path / "b.jsonl")))
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert "row/s" not in r.stderr  # CliRunner's stderr is no terminal
    out = tmp_path / "out"
    for path in (out / "a" / "metrics.json", out / "a" / "trees_generations.settings.json", out / "sweep.json",
                 out / "a" / "trees" / "summary.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_rescoring_without_plots_removes_the_old_plots(runner, cli, tmp_path, trees):
    pytest.importorskip("matplotlib")
    src = _responses(tmp_path / "a.jsonl")
    args = ["score", "--data", str(trees), "--responses", str(src), "--out", str(tmp_path / "s")]
    assert runner.invoke(cli, args).exit_code == 0
    assert (tmp_path / "s" / "recall_heatmap.png").is_file()
    assert runner.invoke(cli, args + ["--no-plots"]).exit_code == 0
    assert not list((tmp_path / "s").glob("*.png"))


def test_ops_eval_names_a_non_utf8_expression_and_help_shows_its_summary(runner, cli):
    r = runner.invoke(cli, ["ops", "eval", "func_1(x, '\udcff')", "--input", "a"])
    assert r.exit_code == 2 and "not valid UTF-8" in r.output
    r = runner.invoke(cli, ["ops", "--help"])
    assert "Evaluate an expression such as func_3(func_1(x, 2)) on --input." in r.output
