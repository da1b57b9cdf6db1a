"""Progress on every command that can run long (issue 24, item 7): `score` shows a bar on stderr
when forced (--progress; stderr is no terminal under CliRunner), on a terminal by default, and
nothing with --no-progress. The others: `validate`, `verify` in tests/test_verify_checks.py,
`leakage` in tests/test_fidelity.py, `fit` in tests/test_fit_cli.py, `eval` in
tests/test_eval_replay.py. Nothing here is timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import small_builds


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return small_builds.native_stage1(tmp_path_factory.mktemp("progress") / "b", limit=8)


def _stderr(runner, cli, args: list[str]) -> str:
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    return res.stderr


def test_show_progress_follows_the_flag_else_the_terminal(monkeypatch):
    import sys

    from opgen.cli import options

    assert options.show_progress(True) and not options.show_progress(False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert options.show_progress(None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not options.show_progress(None)


def test_score_shows_responses_graded(built, runner, cli, tmp_path):
    data = sorted(built.glob("*.parquet"))[0]
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "responses": ["x", "y"]}) + "\n" for i in range(3)))
    args = ["score", "--data", str(data), "--responses", str(responses), "--no-plots", "--workers", "1"]
    err = _stderr(runner, cli, [*args, "--out", str(tmp_path / "a"), "--progress"])
    assert "score:" in err and "/6 " in err and "response" in err, err
    err = _stderr(runner, cli, [*args, "--out", str(tmp_path / "b"), "--no-progress"])
    assert "score:" not in err and "response/s" not in err, err
    a, b = ((tmp_path / d / "scores.jsonl").read_text() for d in "ab")
    assert a == b  # the bar changes no grade
