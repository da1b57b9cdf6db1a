"""Metric definitions as options (#23 item 3): the drift bucket by the farthest, nearest or every call
of an operator; the breakdown by tail calls; pass@k by the unbiased or the earliest-rank estimator —
each named in summary.json, wired into `opgen score`."""

from __future__ import annotations

import json

import pytest
import tiny_model as tm

from opgen.score import metrics as M

# one row calling func_24 twice: at 10 characters (1 tail call) and at 200 (4 tail calls); its
# func_24 recall block is an arity error (the study's: it drops the depth parameter)
REC = {"index": 0, "acc": 0.0, "score": 0.0, "format_ok": True, "error": "arity",
       "op_calls": {"func_24": [[10, 1], [200, 4]]}, "op_distance": {"func_24": 200},
       "recalls": [{"op": "func_24", "verdict": "arity", "detail": "takes 1..1 parameters, func_24 takes 2"}]}


def _tables(call: str) -> dict:
    return M.Summary.of([REC], M.MetricDefs(drift_call=call)).result(1, 1)


@pytest.mark.parametrize("call, buckets", [("farthest", {"150+": 1}), ("nearest", {"<40": 1}),
                                           ("every", {"<40": 1, "150+": 1})])
def test_drift_bucket_by_farthest_nearest_or_every_call(call, buckets):
    table = _tables(call)["arity_by_distance"]["func_24"]
    assert {b: d["written"] for b, d in table.items() if d["written"]} == buckets
    assert all(d["arity"] == d["written"] for d in table.values())


@pytest.mark.parametrize("call, tails", [("farthest", ["4"]), ("nearest", ["1"]), ("every", ["1", "4"])])
def test_breakdown_by_tail_calls(call, tails):
    assert sorted(_tables(call)["arity_by_tail_calls"]["func_24"]) == tails


def test_row_measures_keep_every_call_with_its_tail_calls():
    m = M.row_measures({"call_ops": ["func_24", "func_1", "func_24"], "call_chars": [200, 3, 10],
                        "call_tails": [4, 0, 1]})
    assert m["op_distance"] == {"func_1": 3, "func_24": 200}
    assert m["op_calls"] == {"func_1": [[3, 0]], "func_24": [[10, 1], [200, 4]]}


def test_pass_at_k_estimators_differ_where_they_should():
    rows = {0: [False, True], 1: [True, False]}
    assert M.pass_at_k_table(rows, "unbiased") == {"pass@1": 0.5, "pass@2": 1.0}
    assert M.pass_at_k_table(rows, "earliest") == {"pass@1": 0.5, "pass@2": 1.0}
    rows = {0: [False, True]}
    assert M.pass_at_k_table(rows, "unbiased")["pass@1"] == 0.5
    assert M.pass_at_k_table(rows, "earliest")["pass@1"] == 0.0  # its first sample is wrong
    with pytest.raises(ValueError, match="unknown pass@k estimator"):
        M.pass_at_k_table(rows, "median")
    with pytest.raises(ValueError, match="unknown drift call"):
        M.MetricDefs(drift_call="middle")


@pytest.mark.parametrize("pass_k, expected", [("unbiased", 0.5), ("earliest", 0.0)])
def test_opgen_score_takes_the_definitions_and_names_them(runner, cli, tmp_path, pass_k, expected):
    data = tm.write_trees(tmp_path / "trees.parquet")
    wrong = [tm.ra_answer(e).replace(f"return {e}", "return func_3(x) + 'wrong'") for e, _x in tm.TREES]
    lines = [json.dumps({"index": i, "responses": [wrong[i], tm.ra_answer(e)]}) + "\n"
             for i, (e, _x) in enumerate(tm.TREES)]
    (tmp_path / "r.jsonl").write_text("".join(lines))
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"), "--out",
                              str(tmp_path / "out"), "--no-plots", "--pass-k", pass_k, "--drift-call", "nearest"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["metric_definitions"]["pass_at_k"] == pass_k
    assert summary["metric_definitions"]["drift_call"] == "nearest"
    assert pass_k in summary["metric_definitions"]["pass_at_k_estimator"]
    assert summary["pass_at_k"]["pass@1"] == pytest.approx(expected)
    assert "arity_by_tail_calls" in summary


def test_opgen_eval_and_its_sweep_take_the_definitions(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    models = []
    for m in ("step1", "step2"):
        (tmp_path / m).mkdir()
        (tmp_path / m / "trees_generations.jsonl").write_text("".join(
            json.dumps({"index": i, "response": tm.ra_answer(e)}) + "\n" for i, (e, _x) in enumerate(tm.TREES)))
        models += ["--model", str(tmp_path / m)]
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--quiet", "--data", str(data), *models, "--out",
                              str(tmp_path / "out"), "--drift-call", "every", "--pass-k", "earliest"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "out" / "step1" / "metrics.json").read_text())
    assert metrics["data"]["trees"]["summary"]["metric_definitions"]["pass_at_k"] == "earliest"
    rows = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert rows[0]["metric_definitions"] == {"drift_call": "every"}
