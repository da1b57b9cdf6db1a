"""`opgen score` end to end: build with `opgen build`, answer with gold and with wrong answers, check artifacts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from score_golden import NATIVE

from opgen import expr as E

RECIPE = """\
name: score-e2e
seed: 3
defaults: {kind: rl, role: eval, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  heldout_trees:
    family: heldout_trees
    generator: trees
    options: {ops: heldout, depths: [1, 2, 3, 4], per_depth: 4}
  trainop_chains:
    family: trainop_chains
    generator: chains
    options: {ops: train, depths: [2, 8], per_depth: 3, max_output_chars: 1000}
  groups:
    family: sft_eco
    generator: sft_cell
    kind: sft
    options:
      atomic: {pool: sft-atomic, per_op: 1, ops: all}
      width: [2, 4]
      compositions: {pool: trainop-mixed-d2-4, rows: 4, ops: train, depths: [2, 3]}
  prose:
    family: prose
    generator: trees
    answer_format: prose_code
    options: {ops: all, depths: [2], rows: 6}
  forward:
    family: forward
    generator: trees
    prompt_format: forward
    answer_format: json_output
    options: {ops: all, depths: [1, 2], rows: 6}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    from click.testing import CliRunner
    from opgen.cli import cli

    root = tmp_path_factory.mktemp("build")
    (root / "r.yaml").write_text(RECIPE)
    res = CliRunner().invoke(cli, ["build", str(root / "r.yaml"), "--out", str(root / "out"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    return root / "out"


def gold(row: dict) -> str:
    """The SFT rows' own ``response``; for RL rows the builder's renderer on the row's tasks."""
    if row.get("response"):
        return row["response"]
    from opgen import formats
    from opgen.tasks import Item, Task

    gt = json.loads(row["reward_model"]["ground_truth"])
    ei = row["extra_info"]
    item = Item(tuple(Task(E.parse(t["expr"]), t["input"], t["output"]) for t in gt["tasks"]),
                condition=ei["condition"], assistant_prefix=ei["assistant_prefix"])
    return formats.Formatter(ei["prompt_format"], ei["answer_format"]).answer(item, formats.prepare(item))


_RETURN = re.compile(r"(def main_solution(?:_\d+)?\(x\):\n    return )(.*)")


def wrong(row: dict, answer: str) -> str:
    """A deliberately wrong answer: every program's result gets a suffix; a forward value a space."""
    if row["extra_info"]["mode"] == "forward":
        gt = json.loads(row["reward_model"]["ground_truth"])
        return answer.replace(json.dumps({"output": gt["tasks"][0]["output"]}, ensure_ascii=False),
                              json.dumps({"output": gt["tasks"][0]["output"] + " "}, ensure_ascii=False))
    return _RETURN.sub(lambda m: f"{m.group(1)}({m.group(2)}) + '!'", answer)


def run(cli, runner, data: Path, responses: list[dict], out: Path, *extra: str):
    rpath = out.with_suffix(".jsonl")
    rpath.write_text("".join(json.dumps(r) + "\n" for r in responses))
    return runner.invoke(cli, ["score", "--data", str(data), "--responses", str(rpath), "--out", str(out),
                               "--workers", "2", *extra])


@pytest.mark.slow
@pytest.mark.parametrize("split", ["heldout_trees", "trainop_chains", "groups", "prose", "forward"])
def test_every_gold_answer_scores_one_and_every_wrong_one_zero(built, cli, runner, tmp_path, split):
    data = built / f"{split}.parquet"
    rows = pq.read_table(data).to_pylist()
    answers = [{"index": i, "responses": [gold(r), wrong(r, gold(r))]} for i, r in enumerate(rows)]
    res = run(cli, runner, data, answers, tmp_path / "out")
    assert res.exit_code == 0, res.output
    scores = [json.loads(line) for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 2 * len(rows)
    golds = [s for s in scores if s["sample"] == 0]
    wrongs = [s for s in scores if s["sample"] == 1]
    assert all(s["score"] == 1.0 and s["error"] == "" and s["format_ok"] for s in golds), \
        [(s["index"], s["error"], s["tasks"]) for s in golds if s["score"] != 1.0]
    assert all(s["score"] == 0.0 and s["error"] == "wrong_output" for s in wrongs)
    if split != "forward":
        assert all(s["structure_ok"] for s in golds)
        assert all(r["verdict"] == "correct" for s in golds for r in s["recalls"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["overall"]["acc"] == 0.5 and summary["responses"] == 2 * len(rows)
    assert summary["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}
    assert summary["isolation"]


def test_artifacts_tables_and_plots(built, cli, runner, tmp_path):
    data = built / "heldout_trees.parquet"
    rows = pq.read_table(data).to_pylist()
    # Row 0 unanswered; row 1 answered with func_24's arity error where it is used, else wrong.
    answers = [{"index": i, "response": gold(r)} for i, r in enumerate(rows) if i != 0]
    res = run(cli, runner, data, answers, tmp_path / "out")
    assert res.exit_code == 0, res.output
    assert "1 rows have no response" in res.output and "isolation" in res.output
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows_without_response"] == 1 and summary["rows"] == len(rows)
    assert set(summary["by_depth"]) == {"1", "2", "3", "4"}
    assert all(p["acc"] == 1.0 and p["ci_low"] < 1.0 for p in summary["by_depth"].values())
    assert summary["recall_by_op"] and all(d["acc"] == 1.0 for d in summary["recall_by_op"].values())
    csv_text = (out / "summary.csv").read_text()
    assert csv_text.startswith("table,key,n,correct,acc,ci_low,ci_high\n") and "\nrecall_op,func_" in csv_text
    for png in ("accuracy_vs_depth.png", "recall_heatmap.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chimera_and_arity_tables(built, cli, runner, tmp_path):
    from opgen import ops

    data = built / "heldout_trees.parquet"
    rows = pq.read_table(data).to_pylist()
    # Each wrong answer carries exactly one fault: the chimera row holds no func_24 (whose correct
    # recall would otherwise count in its arity rate) and the arity row no func_2.
    i = next(i for i, r in enumerate(rows) if "func_2" in r["extra_info"]["ops"]
             and "func_24" not in r["extra_info"]["ops"])
    j = next(j for j, r in enumerate(rows) if "func_24" in r["extra_info"]["ops"]
             and "func_2" not in r["extra_info"]["ops"])
    # func_14's body under func_2's name (recall and assembly alike); func_24 without its depth parameter.
    chimera = gold(rows[i]).replace(ops.get("func_2").source, ops.get("func_14").source.replace("func_14", "func_2"))
    arity = gold(rows[j]).replace("def func_24(s, depth):", "def func_24(s):")
    assert chimera != gold(rows[i]) and arity != gold(rows[j])
    res = run(cli, runner, data, [{"index": i, "response": chimera}, {"index": j, "response": arity}],
              tmp_path / "out")
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["chimera_confusion"]["func_2"] == {"func_14": 1}
    assert summary["recall_by_op"]["func_2"]["chimera"] == 1
    assert summary["recall_by_op"]["func_24"]["arity_rate"] == 1.0
    assert summary["errors"]["arity"] == 1
    assert "arity_rate,func_24,1,1,1.0," in (tmp_path / "out" / "summary.csv").read_text()


@pytest.mark.parametrize("lines,message", [
    (["{not json"], ":1: not JSON"),
    ([{"response": "x"}], "'index' must be an integer"),
    ([{"index": 999, "response": "x"}], "index 999 does not exist"),
    ([{"index": 0, "response": "x"}, {"index": 0, "response": "y"}], ":2: duplicate index 0"),
    ([{"index": 0, "responses": []}], "non-empty list"),
    ([{"index": 0}], "needs 'response'"),
])
def test_bad_responses_are_clear_errors(built, cli, runner, tmp_path, lines, message):
    rpath = tmp_path / "r.jsonl"
    rpath.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    res = runner.invoke(cli, ["score", "--data", str(built / "forward.parquet"), "--responses", str(rpath),
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and message in res.output, res.output
    assert not (tmp_path / "o" / "summary.json").exists()


def test_missing_files_and_bad_parquet(cli, runner, tmp_path):
    (tmp_path / "r.jsonl").write_text(json.dumps({"index": 0, "response": "x"}) + "\n")
    res = runner.invoke(cli, ["score", "--data", str(tmp_path / "nope.parquet"), "--responses",
                              str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "nope.parquet" in res.output
    (tmp_path / "bad.parquet").write_text("not parquet")
    res = runner.invoke(cli, ["score", "--data", str(tmp_path / "bad.parquet"), "--responses",
                              str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "bad.parquet" in res.output
    pq.write_table(pa.table({"x": [1]}), tmp_path / "cols.parquet")
    res = runner.invoke(cli, ["score", "--data", str(tmp_path / "cols.parquet"), "--responses",
                              str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "reward_model" in res.output


def test_native_benchmark_rows(cli, runner, tmp_path):
    gts = NATIVE[:2]  # a string output and a list one
    table = pa.table({"data_source": ["codeio-forward-stage1"] * 2,
                      "reward_model": [{"style": "rule", "ground_truth": json.dumps(g)} for g in gts]})
    pq.write_table(table, tmp_path / "native.parquet")
    answers = [{"index": 0, "responses": ['```json\n{"output": "cba"}\n```', '{"output": "abc"}']},
               {"index": 1, "responses": ['{"output": [2]}', '{"output": ["2"]}']}]
    res = run(cli, runner, tmp_path / "native.parquet", answers, tmp_path / "out")
    assert res.exit_code == 0, res.output
    scores = [json.loads(s) for s in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert [s["score"] for s in scores] == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.slow
def test_artifacts_are_byte_identical_across_workers_and_hash_seeds(built, tmp_path):
    import os
    import subprocess
    import sys

    data = built / "heldout_trees.parquet"
    rows = pq.read_table(data).to_pylist()
    rpath = tmp_path / "r.jsonl"
    rpath.write_text("".join(json.dumps({"index": i, "responses": [gold(r), wrong(r, gold(r)), "nothing"]}) + "\n"
                             for i, r in enumerate(rows)))
    outs = []
    for workers, seed in (("1", "0"), ("3", "12345")):
        out = tmp_path / f"o{workers}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses",
                               str(rpath), "--out", str(out), "--workers", workers],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    for name in ("scores.jsonl", "summary.json", "summary.csv", "accuracy_vs_depth.png", "recall_heatmap.png"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


PROBE_RECIPE = """\
name: p1b
seed: 1
defaults: {role: eval, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  probe_1b:
    generator: probe_1b
    family: probe_1b
    options: {targets: [func_24, func_6], r: [0, 2], others: [train], per_condition: 3}
"""


def test_teacher_forced_prefix_rows_grade_the_continuation(cli, runner, tmp_path):
    (tmp_path / "p.yaml").write_text(PROBE_RECIPE)
    res = runner.invoke(cli, ["build", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "b"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    data = tmp_path / "b" / "probe_1b.parquet"
    rows = pq.read_table(data).to_pylist()
    assert any(r["extra_info"]["assistant_prefix"] for r in rows)
    # Backends return only the generated text: the gold answer without its prefix.
    answers = []
    for i, r in enumerate(rows):
        g, prefix = gold(r), r["extra_info"]["assistant_prefix"]
        assert g.startswith(prefix)
        cont = g[len(prefix):]
        answers.append({"index": i, "responses": [cont, cont.replace("def func_24(s, depth):", "def func_24(s):")]})
    res = run(cli, runner, data, answers, tmp_path / "out")
    assert res.exit_code == 0, res.output
    scores = [json.loads(s) for s in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    for s in scores:
        # Only the target's own block is judged; the prefix's blocks were given, not recalled.
        assert s["recall"]["expected"] == 1 and s["missing"] == [], s
        assert [r["op"] for r in s["recalls"]] == [s["target_op"]]
    assert all(s["score"] == 1.0 for s in scores if s["sample"] == 0)
    drifted = [s for s in scores if s["sample"] == 1 and s["target_op"] == "func_24"]
    assert drifted and all(s["error"] == "arity" and s["recalls"][0]["verdict"] == "arity" for s in drifted)


def test_weak_sandbox_is_refused_unless_the_flag_is_given(built, cli, runner, tmp_path, monkeypatch):
    """Below full isolation `opgen score` refuses, naming what is unprotected and the flag; with
    --allow-weak-sandbox it grades and says the level."""
    import functools

    import opgen.score.report as R
    from opgen.score.sandbox import Sandbox

    monkeypatch.delenv("OPGEN_ALLOW_WEAK_SANDBOX", raising=False)
    monkeypatch.setattr(R, "Sandbox", functools.partial(Sandbox, namespaces=False))
    data = built / "heldout_trees.parquet"
    rows = pq.read_table(data).to_pylist()
    responses = [{"index": 0, "response": gold(rows[0])}]
    res = run(cli, runner, data, responses, tmp_path / "refused")
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "below 'full'" in res.output and "--allow-weak-sandbox" in res.output, res.output
    assert "model code has the machine's network" in res.output
    assert not (tmp_path / "refused" / "scores.jsonl").exists()
    res = run(cli, runner, data, responses, tmp_path / "allowed", "--allow-weak-sandbox")
    assert res.exit_code == 0, res.output
    assert "isolation partial(" in res.output
    assert json.loads((tmp_path / "allowed" / "summary.json").read_text())["isolation"].startswith("partial(")


def test_eval_refuses_a_weak_sandbox_before_generating(built, cli, runner, tmp_path, monkeypatch):
    import functools

    import opgen.score.sandbox as S

    monkeypatch.delenv("OPGEN_ALLOW_WEAK_SANDBOX", raising=False)
    monkeypatch.setattr(S, "Sandbox", functools.partial(S.Sandbox, namespaces=False))
    replay = tmp_path / "model.jsonl"
    replay.write_text("")
    res = runner.invoke(cli, ["eval", "--model", str(replay), "--data", str(built / "heldout_trees.parquet"),
                              "--out", str(tmp_path / "ev"), "--backend", "replay"])
    assert res.exit_code != 0 and "below 'full'" in res.output and "--allow-weak-sandbox" in res.output, res.output
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").rglob("*generations*"))


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"])
def test_a_response_holding_a_unicode_line_separator_breaks_no_line(cli, runner, tmp_path, sep):
    """JSON lets U+2028, U+2029 and U+0085 stand unescaped in a string (opgen eval writes them so);
    a model that answers with one must not make its line, or the file's other grades, unreadable."""
    import tiny_model as tm

    data = tm.write_trees(tmp_path / "trees.parquet", n=3)
    e = tm.TREES[0][0]
    lines = [{"index": 0, "response": tm.ra_answer(e)}, {"index": 1, "response": f"a{sep}b"},
             {"index": 2, "response": tm.ra_answer(tm.TREES[2][0]) + sep}]
    rpath = tmp_path / "r.jsonl"
    rpath.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    assert sep in rpath.read_text(encoding="utf-8")
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(rpath), "--out", str(tmp_path / "o"),
                              "--no-plots"])
    assert res.exit_code == 0, res.output
    scores = [json.loads(line) for line in (tmp_path / "o" / "scores.jsonl").read_text().split("\n") if line]
    assert [s["index"] for s in scores] == [0, 1, 2]
    assert [s["score"] for s in scores] == [1.0, 0.0, 1.0]
