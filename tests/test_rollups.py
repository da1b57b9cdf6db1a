"""Roll-ups by role (#23 item 2): ID/OOD/total are made of eval files only; probes scored beside them
never enter them and report per condition; the study's arity error is func_24's, with the all-operator
rate beside it under its own name; files without extra_info.ops get scopes from their programs; and
every roll-up names the files (and rows) that made it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm

from opgen.score import metrics as M

N = len(tm.TREES)


def _wrong(e: str) -> str:
    return tm.ra_answer(e).replace(f"return {e}", "return func_3(x) + 'wrong'")


def _probe_file(path: Path, manifest: bool) -> Path:
    rows = [tm.program_row(i, *tm.TREES[i], split="probe_1f") for i in range(N)]
    if not manifest:  # no manifest: the rows' condition says what the file is
        for i, r in enumerate(rows):
            r["extra_info"]["condition"] = f"m={i % 2}"
    tm.write_rows(path, rows)
    if manifest:
        (path.parent / "manifest.json").write_text(json.dumps({"splits": {"probe_1f": {
            "role": "eval", "generator": "probe_1f", "family": "probe_1f",
            "files": [{"path": path.name, "rows": N}]}}}))
    return path


def _foreign_file(path: Path) -> Path:
    rows = [tm.program_row(i, *tm.TREES[i]) for i in range(N)]
    for r in rows:
        r["extra_info"]["ops"] = []  # a foreign file: no extra_info.ops
    return tm.write_rows(path, rows)


@pytest.fixture(scope="module", params=["manifest", "rows"])
def evaluated(request, tmp_path_factory):
    """One replay eval per probe-role source, shared by the tests that read it (they only read)."""
    from click.testing import CliRunner
    from opgen.cli import cli

    runner, tmp_path = CliRunner(), tmp_path_factory.mktemp(f"rollup-{request.param}")
    (tmp_path / "data").mkdir()
    trees = tm.write_trees(tmp_path / "data" / "trees.parquet")
    (tmp_path / "probes").mkdir()
    probe = _probe_file(tmp_path / "probes" / "probe_1f.parquet", request.param == "manifest")
    models = []
    for m in ("step1", "step2"):
        folder = tmp_path / m
        folder.mkdir()
        # eval rows: all right but row 0; probe rows: all wrong (pooling them would move every number)
        (folder / "trees_generations.jsonl").write_text("".join(
            json.dumps({"index": i, "response": _wrong(e) if i == 0 else tm.ra_answer(e)}) + "\n"
            for i, (e, _x) in enumerate(tm.TREES)))
        (folder / "probe_1f_generations.jsonl").write_text("".join(
            json.dumps({"index": i, "response": _wrong(e)}) + "\n" for i, (e, _x) in enumerate(tm.TREES)))
        models += ["--model", str(folder)]
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--quiet", "--data", str(trees), "--data", str(probe),
                              *models, "--out", str(tmp_path / "out")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return tmp_path / "out", request.param


@pytest.mark.slow
def test_probes_scored_beside_eval_files_never_enter_id_ood_total(evaluated):
    out, how = evaluated
    metrics = json.loads((out / "step1" / "metrics.json").read_text())
    assert metrics["data"]["probe_1f"]["summary"]["role"]["role"] == "probe"
    assert ("manifest.json" in metrics["data"]["probe_1f"]["summary"]["role"]["from"]) == (how == "manifest")
    assert metrics["data"]["trees"]["summary"]["role"]["role"] == "eval"
    scope = metrics["scope"]
    assert (scope["total"]["n"], scope["total"]["correct"]) == (N, N - 1)  # not 2N rows, N - 1 correct
    assert scope["total"]["files"] == {"trees": N} and scope["id"]["files"] == {"trees": N}
    assert scope["left_out"] == {"probe_1f": "probe"}


@pytest.mark.slow
def test_the_sweep_rolls_up_eval_rows_and_reports_probes_per_condition(evaluated):
    out, how = evaluated
    rows = json.loads((out / "sweep.json").read_text())
    r = rows[0]
    assert r["roles"] == {"probe_1f": "probe", "trees": "eval"}
    assert r["scope"]["total"]["n"] == N and r["scope"]["total"]["acc"] == pytest.approx((N - 1) / N)
    assert r["sources"]["scope"] == {"trees": N}
    assert set(r["sources"]["arity"]) == {"trees"}  # the arity tables hold no probe block
    pr = r["probes"]["probe_1f"]
    assert pr["rows"] == N and all(p["acc"] == 0.0 for p in pr["by_condition"].values())
    if how == "rows":
        assert sorted(pr["by_condition"]) == ["m=0", "m=1"]
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    assert "scope_files" in header and "arity_error_rate_all_ops" in header
    assert any(h.startswith("probe[probe_1f|") for h in header)


def test_foreign_files_get_scopes_from_the_operators_their_programs_call(runner, cli, tmp_path):
    data = _foreign_file(tmp_path / "foreign.parquet")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "foreign_generations.jsonl").write_text("".join(
        json.dumps({"index": i, "response": tm.ra_answer(e)}) + "\n" for i, (e, _x) in enumerate(tm.TREES)))
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--quiet", "--data", str(data), "--model",
                              str(tmp_path / "m"), "--out", str(tmp_path / "out")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "out" / "m" / "metrics.json").read_text())
    summary = metrics["data"]["foreign"]["summary"]
    assert summary["scope_from"] == {"program": N}
    assert summary["by_scope"]["id"]["n"] + summary["by_scope"]["ood"]["n"] == N  # every row has a scope
    assert metrics["scope"]["total"]["n"] == N


def test_program_ops_parses_never_runs():
    gt = json.loads(tm.program_row(0, "func_1(func_3(x), 2)", "abc")["reward_model"]["ground_truth"])
    assert M.program_ops(json.dumps(gt)) == ("func_1", "func_3")
    native = {"ref_code": "def func_3(x):\n    return x\ndef main_solution(x):\n    return func_3(func_1(x, 2))\n",
              "funcname": "main_solution"}
    assert M.program_ops(native) == ("func_3", "func_1")
    hostile = {"ref_code": "def main_solution(x):\n    return __import__('os').system('touch /tmp/pwned')\n"}
    assert M.program_ops(hostile) is None
    assert M.program_ops("not json") is None and M.program_ops({"tasks": [{"expr": "x +"}]}) is None


def test_the_study_arity_error_is_func_24s_and_the_all_operator_rate_has_its_own_name():
    from opgen.sweep import arity_rates

    dropped = {"op": "func_24", "verdict": "arity", "detail": "takes 1..1 parameters, func_24 takes 2"}
    added = {"op": "func_1", "verdict": "arity", "detail": "takes 3..3 parameters, func_1 takes 2"}
    recs = [{"index": 0, "acc": 0.0, "score": 0.0, "format_ok": True, "error": "arity",
             "recalls": [dropped, {"op": "func_24", "verdict": "correct"}, added]
             + [{"op": "func_1", "verdict": "correct"}] * 21}]
    r = arity_rates([M.Summary.of(recs).result(1, 1)])
    assert r["arity_error_rate"] == 0.5 and r["func_24_blocks"] == 2
    # an added parameter is an arity verdict, but not the study's error: a rate of its own
    assert r["arity_error_rate_all_ops"] == pytest.approx(1 / 24)
    assert r["arity_added_rate_all_ops"] == pytest.approx(1 / 24)
