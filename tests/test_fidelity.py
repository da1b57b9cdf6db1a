"""Issue 18: opgen's numbers mean what the study's numbers mean (labels, data sources, roll-ups,
degenerate rows, name→argument distances, dedup by program, cross-build leakage, stage prompts)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tiny_model as tm


def build(runner, cli, tmp_path: Path, recipe: str, name: str = "r", *extra: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(recipe)
    out = tmp_path / f"{name}-out"
    res = runner.invoke(cli, ["build", str(path), "--out", str(out), *extra])
    return res, out


def extra_of(path: Path) -> list[dict]:
    return pq.read_table(path).column("extra_info").to_pylist()


# ---------------------------------------------------------------- item 7: labels, data_source, roll-up

LABELS = """\
name: labels
seed: 1
defaults: {role: eval, kind: rl}
splits:
  atomic:
    generator: atomic
    options: {ops: [func_7, func_20, func_3], per_op: 4}
  lit:
    generator: probe_1g
    options: {targets: [func_24], lengths: [8, 50], per_condition: 3}
"""


@pytest.mark.slow
def test_atomic_interlace_tasks_and_long_literal_probes_are_labelled_atomic(runner, cli, tmp_path):
    res, out = build(runner, cli, tmp_path, LABELS)
    assert res.exit_code == 0, res.output
    assert {e["structure"] for e in extra_of(out / "atomic.parquet")} == {"atomic"}
    assert {e["structure"] for e in extra_of(out / "lit.parquet")} == {"atomic"}


PER_DEPTH = """\
name: per-depth
seed: 0
defaults: {role: eval, kind: rl}
splits:
  heldout_trees_d1-8:
    generator: trees
    family: heldout_trees
    data_source: "opgen/{family}/d{depth}"
    options: {ops: heldout, depths: [1, 4, 8], per_depth: 3}
  plain:
    generator: chains
    options: {ops: heldout, depths: [1, 2], per_depth: 2}
"""


@pytest.mark.slow
def test_data_source_per_family_and_depth(runner, cli, tmp_path):
    res, out = build(runner, cli, tmp_path, PER_DEPTH)
    assert res.exit_code == 0, res.output
    sources = pq.read_table(out / "heldout_trees_d1-8.parquet").column("data_source").to_pylist()
    assert sources == ["opgen/heldout_trees/d1"] * 3 + ["opgen/heldout_trees/d4"] * 3 + ["opgen/heldout_trees/d8"] * 3
    assert set(pq.read_table(out / "plain.parquet").column("data_source").to_pylist()) == {"opgen/plain"}
    man = json.loads((out / "manifest.json").read_text())
    assert man["recipes"][0]["resolved"]["splits"]["plain"]["data_source"] == "opgen/{family}"


@pytest.mark.parametrize("template", ["opgen/{split}", "opgen/{depth:03d}", "opgen/{family"])
def test_bad_data_source_template_names_the_field(runner, cli, tmp_path, template):
    res, out = build(runner, cli, tmp_path, PER_DEPTH.replace('"opgen/{family}/d{depth}"', json.dumps(template)))
    assert res.exit_code == 2, res.output
    assert "splits.heldout_trees_d1-8.data_source" in res.output and "Traceback" not in res.output


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.slow
def test_id_ood_total_rollup_in_summary_metrics_and_sweep(runner, cli, tmp_path):
    # tm.TREES are train-operator programs; a second file holds held-out-operator programs
    trees = tm.write_trees(tmp_path / "trees.parquet")
    held = [("func_24(x, 2)", "abca"), ("func_6(func_21(x), 'ab')", "hello"), ("func_2(x)", "strength")]
    heldout = tm.write_rows(tmp_path / "held.parquet",
                            [tm.program_row(i, e, x, split="held") for i, (e, x) in enumerate(held)])
    answers = [{"index": i, "response": tm.ra_answer(e) if i == 0 else "no"} for i, (e, _) in enumerate(tm.TREES)]
    answers += [{"index": 100 + i, "response": tm.ra_answer(e)} for i, (e, _) in enumerate(held)]
    for model in ("step1", "step2"):
        folder = tmp_path / model
        folder.mkdir()
        _write_jsonl(folder / "trees_generations.jsonl", answers[:len(tm.TREES)])
        _write_jsonl(folder / "held_generations.jsonl",
                     [{"index": a["index"] - 100, "response": a["response"]} for a in answers[len(tm.TREES):]])
    args = ["eval", "--backend", "replay", "--quiet", "--data", str(trees), "--data", str(heldout),
            "--model", str(tmp_path / "step1"), "--model", str(tmp_path / "step2"), "--out", str(tmp_path / "out")]
    res = runner.invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    n = len(tm.TREES)
    summary = json.loads((tmp_path / "out" / "step1" / "held" / "summary.json").read_text())
    assert summary["by_scope"]["ood"]["n"] == 3 and summary["by_scope"]["id"]["n"] == 0
    metrics = json.loads((tmp_path / "out" / "step1" / "metrics.json").read_text())
    scope = metrics["scope"]
    assert (scope["id"]["n"], scope["id"]["correct"]) == (n, 1)
    assert (scope["ood"]["n"], scope["ood"]["correct"]) == (3, 3)
    assert (scope["total"]["n"], scope["total"]["correct"]) == (n + 3, 4)
    assert scope["ood"]["ci_low"] < 1.0 == scope["ood"]["acc"]
    rows = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert rows[0]["scope"]["ood"]["acc"] == 1.0 and rows[0]["scope"]["id"]["acc"] == pytest.approx(1 / n)
    # depth columns never pool two data files: depth 1 of each file stands alone
    assert rows[0]["by_depth"] == {}
    assert set(rows[0]["by_data_depth"]) == {"trees", "held"}
    assert rows[0]["by_data_depth"]["held"]["1"]["n"] == 2
    header = (tmp_path / "out" / "sweep.csv").read_text().splitlines()[0].split(",")
    assert "acc[held|d=1]" in header and "acc[trees|d=1]" in header and "acc[d=1]" not in header
    assert {"id_accuracy", "ood_accuracy", "total_accuracy"} <= set(header)


# ---------------------------------------------------------------- item 6: degenerate rows

DEGENERATE = """\
name: degenerate
seed: 1
defaults: {role: eval, kind: rl}
splits:
  ident:
    generator: atomic
    options: {ops: [func_21], per_op: 6}
  trees:
    generator: trees
    options: {ops: heldout, depths: [1, 2, 3], per_depth: 40}
"""


@pytest.mark.slow
def test_degenerate_measures_in_rows_and_manifest(runner, cli, tmp_path):
    from opgen import expr as E

    res, out = build(runner, cli, tmp_path, DEGENERATE)
    assert res.exit_code == 0, res.output
    # func_21 on lowercase letters is the identity: every row is degenerate
    for e in extra_of(out / "ident.parquet"):
        assert (e["unchanged_calls"], e["output_is_input"]) == (1, 1)
    rows = pq.read_table(out / "trees.parquet").to_pylist()
    for r in rows:
        gt = json.loads(r["reward_model"]["ground_truth"])
        tree, x = E.parse(gt["tasks"][0]["expr"]), gt["tasks"][0]["input"]
        calls = [n for n in E.walk(tree) if isinstance(n, E.Call)]
        unchanged = sum(E.evaluate(c, x) == E.evaluate(c.args[0], x) for c in calls)
        assert r["extra_info"]["unchanged_calls"] == unchanged
        assert r["extra_info"]["output_is_input"] == int(gt["tasks"][0]["output"] == x)
    man = json.loads((out / "manifest.json").read_text())
    deg = man["splits"]["trees"]["degenerate"]
    hist = {int(k): v for k, v in deg["unchanged_calls"].items()}
    assert sum(hist.values()) == len(rows) and hist.get(0, 0) < len(rows)
    assert deg["output_is_input"] == sum(r["extra_info"]["output_is_input"] for r in rows)
    assert man["splits"]["ident"]["degenerate"]["non_degenerate_rows"] == 0


@pytest.mark.slow
def test_require_effect_rejects_calls_that_change_nothing(runner, cli, tmp_path):
    recipe = DEGENERATE.replace("options: {ops: heldout, depths: [1, 2, 3], per_depth: 40}",
                                "options: {ops: heldout, depths: [1, 2, 3], per_depth: 40, require_effect: true}")
    recipe = recipe.replace("options: {ops: [func_21], per_op: 6}",
                            "options: {ops: [func_2, func_3], per_op: 20, require_effect: true}")
    recipe += """\
  chains:
    generator: chains
    options: {ops: heldout, depths: [4], per_depth: 20, require_effect: true}
"""
    res, out = build(runner, cli, tmp_path, recipe)
    assert res.exit_code == 0, res.output
    man = json.loads((out / "manifest.json").read_text())
    for name in ("ident", "trees", "chains"):
        extras = extra_of(out / f"{name}.parquet")
        # every call changes its argument; a composition may still undo itself (func_8 rotations
        # adding up to the length, func_2 stripping the suffix func_6 added): output == input is
        # then possible at depth 2 or more, never for one call
        assert {e["unchanged_calls"] for e in extras} == {0}
        assert not any(e["output_is_input"] for e in extras if e["depth"] == 1)
        clean = sum(1 for e in extras if not e["output_is_input"])
        assert man["splits"][name]["degenerate"]["non_degenerate_rows"] == clean >= len(extras) - 3
    assert man["splits"]["trees"]["rejections"].get("no_effect", 0) > 0
    # the identity operator can never meet it: a clear failure, nothing written
    res, out2 = build(runner, cli, tmp_path, DEGENERATE.replace("per_op: 6}", "per_op: 6, require_effect: true}"),
                      name="never")
    assert res.exit_code == 1 and "no_effect" in res.output and "Traceback" not in res.output
    assert not (out2 / "manifest.json").exists()


def _ra_identity(row: dict) -> str:
    """An RA answer whose program returns x: right exactly on the rows whose output is the input."""
    gt = json.loads(row["reward_model"]["ground_truth"])
    return "Assemble:\n```python\ndef main_solution(x):\n    return x\n```" if gt else ""


@pytest.mark.slow
def test_non_degenerate_accuracy_beside_plain_accuracy(runner, cli, tmp_path):
    res, out = build(runner, cli, tmp_path, DEGENERATE)
    assert res.exit_code == 0, res.output
    answers = tmp_path / "a.jsonl"
    for name in ("ident", "trees"):
        rows = pq.read_table(out / f"{name}.parquet").to_pylist()
        answers.write_text("".join(json.dumps({"index": i, "response": _ra_identity(r)}) + "\n"
                                   for i, r in enumerate(rows)))
        res = runner.invoke(cli, ["score", "--data", str(out / f"{name}.parquet"), "--responses", str(answers),
                                  "--out", str(tmp_path / name), "--no-plots"])
        assert res.exit_code == 0, res.output
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        identity = sum(r["extra_info"]["output_is_input"] for r in rows)
        assert summary["overall"]["correct"] == identity
        assert summary["non_degenerate"]["correct"] == 0
        assert summary["non_degenerate"]["n"] == sum(
            1 for r in rows if not (r["extra_info"]["unchanged_calls"] or r["extra_info"]["output_is_input"]))
        assert "\nnon_degenerate,all," in (tmp_path / name / "summary.csv").read_text()
        assert summary["output_changed"]["correct"] == 0 and summary["output_changed"]["n"] == len(rows) - identity
    assert "non-degenerate rows: accuracy 0.0000" in res.output


# ---------------------------------------------------------------- item 4: distances and arity by bucket

DISTANCES = """\
name: distances
seed: 1
defaults: {role: eval, kind: rl}
splits:
  lit:
    generator: probe_1g
    options: {targets: [func_24], lengths: [8, 60, 200], per_condition: 4}
  trees:
    generator: trees
    options: {ops: heldout, depths: [2, 5], per_depth: 20}
"""


@pytest.mark.slow
def test_every_row_carries_per_call_distances(runner, cli, tmp_path):
    from opgen import expr as E

    res, out = build(runner, cli, tmp_path, DISTANCES)
    assert res.exit_code == 0, res.output
    for r in pq.read_table(out / "trees.parquet").to_pylist():
        tree = E.parse(json.loads(r["reward_model"]["ground_truth"])["tasks"][0]["expr"])
        want = E.tail_distances(tree)
        e = r["extra_info"]
        assert e["call_ops"] == [t.op for t in want] and e["call_chars"] == [t.chars for t in want]
        assert e["call_tails"] == [t.call_tails for t in want]
    lit = extra_of(out / "lit.parquet")
    assert [e["call_chars"] for e in lit] == [[13]] * 4 + [[65]] * 4 + [[205]] * 4
    assert all(e["call_chars"] == [e["tail_chars"]] for e in lit)


@pytest.mark.slow
def test_arity_error_rate_by_distance_bucket(runner, cli, tmp_path):
    res, out = build(runner, cli, tmp_path, DISTANCES)
    assert res.exit_code == 0, res.output
    from test_score_cli import gold

    rows = pq.read_table(out / "lit.parquet").to_pylist()
    # the func_24 recall drops its depth parameter in the far rows only, and in one of the middle ones
    answers = []
    for i, r in enumerate(rows):
        a = gold(r)
        if i >= 8 or i == 4:
            a = a.replace("def func_24(s, depth):", "def func_24(s):")
        answers.append({"index": i, "response": a})
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in answers))
    res = runner.invoke(cli, ["score", "--data", str(out / "lit.parquet"), "--responses", str(path),
                              "--out", str(tmp_path / "s"), "--no-plots"])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "s" / "summary.json").read_text())["arity_by_distance"]["func_24"]
    assert list(table) == ["<40", "40-150", "150+"]
    assert [(b["written"], b["arity"]) for b in table.values()] == [(4, 0), (4, 1), (4, 4)]
    assert table["40-150"]["rate"] == 0.25 and 0 < table["40-150"]["ci_low"] < 0.25 < table["40-150"]["ci_high"]
    assert "arity_by_distance,func_24|150+,4,4,1.0," in (tmp_path / "s" / "summary.csv").read_text()
    # configurable edges
    res = runner.invoke(cli, ["score", "--data", str(out / "lit.parquet"), "--responses", str(path),
                              "--out", str(tmp_path / "s2"), "--no-plots", "--distance-edges", "100"])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "s2" / "summary.json").read_text())["arity_by_distance"]["func_24"]
    assert [(k, b["arity"]) for k, b in table.items()] == [("<100", 1), ("100+", 4)]
    res = runner.invoke(cli, ["score", "--data", str(out / "lit.parquet"), "--responses", str(path),
                              "--out", str(tmp_path / "s3"), "--distance-edges", "150,40"])
    assert res.exit_code == 2 and "--distance-edges" in res.output


@pytest.mark.slow
def test_probe_families_span_the_buckets_they_test(runner, cli, tmp_path):
    from opgen.score.metrics import DISTANCE_EDGES, bucket_of

    out = tmp_path / "probes"
    res = runner.invoke(cli, ["build", "probes", "--out", str(out), "--only", "probe_1f", "--only", "probe_1g",
                              "--only", "probe_1d"])
    assert res.exit_code == 0, res.output
    man = json.loads((out / "manifest.json").read_text())
    for name in ("probe_1d", "probe_1f", "probe_1g"):
        dist = man["splits"][name]["probe_distances"]
        assert len(dist) == len(man["splits"][name]["counts"]["condition"])
        buckets = {bucket_of(d["min"], DISTANCE_EDGES) for d in dist.values()} | \
            {bucket_of(d["max"], DISTANCE_EDGES) for d in dist.values()}
        assert buckets == {"<40", "40-150", "150+"}, (name, dist)
    # 1f's method tails are the training data's own methods
    from opgen import ops

    for r in pq.read_table(out / "probe_1f.parquet").to_pylist():
        expr = json.loads(r["reward_model"]["ground_truth"])["tasks"][0]["expr"]
        for m in set(ops.METHODS) - set(ops.NATIVE_METHODS):
            assert f".{m}()" not in expr


# ---------------------------------------------------------------- item 3: composition demos dedup by program


@pytest.mark.slow
def test_study_composition_pools_hold_distinct_programs(runner, cli, tmp_path):
    from opgen.generate import cells as C

    c4 = C.comp_pool("trainop-mixed-d2", 12452, {"ops": "train", "depths": [2]}, 1)
    assert len(c4) == 12452 and len({t.expr_text for t in c4}) == 12452
    # the old rule (program and input) repeats programs: func_17(func_15(x)) dozens of times
    old = C.comp_pool("trainop-mixed-d2", 12452, {"ops": "train", "depths": [2]}, 1, unique="task")
    assert len({t.expr_text for t in old}) < 0.6 * len(old)
    out = tmp_path / "c4"
    res = runner.invoke(cli, ["build", "sft-c4", "--out", str(out), "--limit", "500"])
    assert res.exit_code == 0, res.output
    split = json.loads((out / "manifest.json").read_text())["splits"]["train"]
    comps = split["cell"]["compositions"]
    assert (comps["tasks"], comps["distinct_programs"], comps["distinct_program_share"]) == (12452, 12452, 1.0)
    share = split["distinct_programs"]
    assert share["tasks"] >= 500 and 0 < share["share"] <= 1.0
    rows = [r for r in pq.read_table(out / "train.parquet").to_pylist() if r["extra_info"]["n_tasks"] == 1
            and r["extra_info"]["depth"] == 2]
    exprs = [json.loads(r["reward_model"]["ground_truth"])["tasks"][0]["expr"] for r in rows]
    assert len(exprs) > 100 and len(set(exprs)) == len(exprs)


# ---------------------------------------------------------------- item 5: leakage across builds

TRAIN_CELL = """\
name: cell
seed: 5
defaults: {role: train, kind: rl}
splits:
  comps:
    generator: trees
    options: {ops: train, depths: [2, 3], rows: 60}
  atoms:
    generator: atomic
    options: {ops: heldout, per_op: 3}
"""
EVAL_SAME = """\
name: evals
seed: 5
defaults: {role: eval, kind: rl}
splits:
  comps:
    generator: trees
    options: {ops: train, depths: [2, 3], rows: 60}
"""


@pytest.mark.slow
def test_a_single_build_says_it_checked_nothing(runner, cli, tmp_path):
    res, out = build(runner, cli, tmp_path, EVAL_SAME, "e")
    assert res.exit_code == 0, res.output
    assert "leakage: nothing to check" in res.output
    assert json.loads((out / "manifest.json").read_text())["leakage"]["nothing_to_check"] is True
    res, out = build(runner, cli, tmp_path, TRAIN_CELL, "t")
    assert res.exit_code == 0, res.output
    assert "held-out composition checked in 2 train splits" in res.output


@pytest.mark.slow
def test_leakage_across_builds_reports_every_kind(runner, cli, tmp_path):
    # Builds cannot leak any more (eval inputs are drawn on the other side, opgen.rng.input_side),
    # so the checker is shown leaking files: an eval build checked against itself as training
    res, evals = build(runner, cli, tmp_path, EVAL_SAME.replace("ops: train", "ops: heldout"), "e")
    assert res.exit_code == 0, res.output
    report = tmp_path / "leak.json"
    # a build folder gives its splits of the side's role (manifest.json): an eval build is no training
    res = runner.invoke(cli, ["leakage", str(evals), "--against", str(evals)])
    assert res.exit_code == 1 and "holds no train split" in res.output and "Traceback" not in res.output
    as_train = str(evals / "comps.parquet")  # a file is taken as given
    res = runner.invoke(cli, ["leakage", as_train, "--against", str(evals), "--report", str(report)])
    assert res.exit_code == 1, res.output
    got = json.loads(report.read_text())
    pair = got["pairs"][0]
    # every prompt, task and held-out composition's program is shared; the training side composes held-out ops
    assert pair["prompt"] == pair["task"] == pair["heldout_program"] == 60 == pair["checked"]["heldout_compositions"]
    assert {v["kind"] for v in got["violations"]} == {"prompt", "task", "heldout_program", "heldout_composed"}
    assert "leakage: FAILED" in res.output and "compose a held-out operator" in res.output
    # held-out operators composed in training: the build's own check refuses it
    res, bad = build(runner, cli, tmp_path, TRAIN_CELL.replace("ops: train", "ops: heldout"), "bad")
    assert res.exit_code == 1 and "compose a held-out operator" in res.output
    # a training cell and an eval recipe of the very same options and seed share nothing
    res, train = build(runner, cli, tmp_path, TRAIN_CELL, "t")
    assert res.exit_code == 0, res.output
    res, same = build(runner, cli, tmp_path, EVAL_SAME, "s")
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["leakage", str(train), "--against", str(same), "--report", str(report)])
    assert res.exit_code == 0 and "leakage: ok" in res.output, res.output
    got = json.loads(report.read_text())
    assert not got["violations"] and all(p["prompt"] == p["task"] == 0 for p in got["pairs"])
    assert "programs also in training, per depth (information)" in res.output


DEMOS = """\
name: demos
seed: 5
defaults: {role: train, kind: sft}
splits:
  demos:
    generator: trees
    options: {ops: train, depths: [2], rows: 3000}
"""


@pytest.mark.slow
def test_leakage_avoid_programs_is_an_explicit_opt_in(runner, cli, tmp_path):
    (tmp_path / "demos.yaml").write_text(DEMOS)
    res, train = build(runner, cli, tmp_path, DEMOS, "demos")
    assert res.exit_code == 0, res.output
    plain_recipe = EVAL_SAME.replace("depths: [2, 3]", "depths: [2]")
    res, plain = build(runner, cli, tmp_path, plain_recipe, "plain")
    assert res.exit_code == 0, res.output
    report = tmp_path / "leak.json"
    res = runner.invoke(cli, ["leakage", str(train), "--against", str(plain), "--report", str(report)])
    assert res.exit_code == 0, res.output  # train-operator programs recur in ID evals: information only
    shared = json.loads(report.read_text())["program_share"][str(plain / "comps.parquet")]["d2"]
    assert shared["tasks"] == 60 and shared["in_training"] > 10
    avoiding = plain_recipe.replace("defaults:", "leakage: {avoid_programs: [demos.yaml]}\ndefaults:")
    res, evals = build(runner, cli, tmp_path, avoiding, "e")
    assert res.exit_code == 0, res.output
    man = json.loads((evals / "manifest.json").read_text())
    assert man["splits"]["comps"]["rows"] == 60 and man["splits"]["comps"]["rejections"]["avoided"] > 10
    res = runner.invoke(cli, ["leakage", str(train), "--against", str(evals), "--report", str(report)])
    assert res.exit_code == 0 and "0 violations" in res.output, res.output
    assert json.loads(report.read_text())["program_share"][str(evals / "comps.parquet")]["d2"]["in_training"] == 0
    # deterministic: the same rows again, with two workers
    res, again = build(runner, cli, tmp_path, avoiding, "e2", "--workers", "2")
    assert res.exit_code == 0, res.output
    assert (again / "comps.parquet").read_bytes() == (evals / "comps.parquet").read_bytes()
    res, _ = build(runner, cli, tmp_path, plain_recipe.replace(
        "defaults:", "leakage: {avoid_programs: [nope.yaml]}\ndefaults:"), "e3")
    assert res.exit_code in (1, 2) and "leakage.avoid_programs" in res.output and "Traceback" not in res.output
    # the removed key says what replaced it
    removed = plain_recipe.replace("defaults:", "leakage: {avoid: [demos.yaml]}\ndefaults:")
    res, _ = build(runner, cli, tmp_path, removed, "e4")
    assert res.exit_code == 2 and "avoid_programs" in res.output and "by construction" in res.output


def test_leakage_report_path_is_checked_before_the_work_and_progress_is_shown(runner, cli, tmp_path):
    res, evals = build(runner, cli, tmp_path, EVAL_SAME, "e")
    assert res.exit_code == 0, res.output
    for bad in (tmp_path / "no-such-folder" / "r.json", tmp_path):
        res = runner.invoke(cli, ["leakage", str(evals), "--against", str(evals), "--report", str(bad)])
        assert res.exit_code == 2 and "--report" in res.output and "Traceback" not in res.output, res.output
        assert "checked" not in res.output  # refused before any file was read
        assert res.exception is None or isinstance(res.exception, SystemExit)
    report = tmp_path / "r.json"
    comps = str(evals / "comps.parquet")
    res = runner.invoke(cli, ["leakage", comps, "--against", str(evals), "--report", str(report), "--progress"])
    assert res.exit_code == 1 and "leakage: read 1/2 files" in res.output and "leakage: read 2/2 files" in res.output
    assert json.loads(report.read_text())["violations"] and not list(tmp_path.glob(".r.json.*"))
    res = runner.invoke(cli, ["leakage", comps, "--against", str(evals), "--no-progress"])
    assert res.exit_code == 1 and "leakage: read" not in res.output


def test_leakage_command_usage_errors(runner, cli, tmp_path):
    res = runner.invoke(cli, ["leakage", str(tmp_path)])
    assert res.exit_code == 2 and "--against" in res.output
    res = runner.invoke(cli, ["leakage", str(tmp_path / "nope"), "--against", str(tmp_path)])
    assert res.exit_code == 2 and "nope" in res.output and "Traceback" not in res.output
    (tmp_path / "bad.parquet").write_text("not parquet")
    res = runner.invoke(cli, ["leakage", str(tmp_path / "bad.parquet"), "--against", str(tmp_path / "bad.parquet")])
    assert res.exit_code == 1 and "bad.parquet" in res.output and "Traceback" not in res.output


# ---------------------------------------------------------------- item 2: closed-book forward, templates, stage 1


@pytest.mark.slow
def test_native_stage2_is_closed_book_forward_with_native_names(runner, cli, tmp_path):
    out = tmp_path / "ns2"
    res = runner.invoke(cli, ["build", "native-stage2", "--out", str(out), "--limit", "40"])
    assert res.exit_code == 0, res.output
    for name in ("stage2_l1_train", "stage2_l2_train", "stage2_l18_test"):
        rows = pq.read_table(out / f"{name}.parquet").to_pylist()
        for r in rows:
            text = r["prompt"][0]["content"]
            assert "def main_solution(x):" in text and "def func_" not in text  # no definition shown
            assert r["data_source"] == f"codeio-forward-incomplete-depth{r['extra_info']['depth']}"
            assert r["ability"] == "reasoning" and r["extra_info"]["mode"] == "forward"
            gt = json.loads(r["reward_model"]["ground_truth"])
            assert gt["mode"] == "forward" and gt["ref_output"] == gt["tasks"][0]["output"]
    res = runner.invoke(cli, ["validate", str(out)])
    assert res.exit_code == 0, res.output


TEMPLATED = """\
name: templated
seed: 0
defaults: {role: eval, kind: rl, prompt_format: closed_book_forward}
splits:
  t:
    generator: trees
    prompt_template: fwd.txt
    options: {ops: heldout, depths: [1, 2], rows: 8}
"""


@pytest.mark.slow
def test_a_users_template_sets_the_prompt_wording(runner, cli, tmp_path):
    (tmp_path / "fwd.txt").write_text("Code:\n{program}\nInput: {input}\nCall {call}; literal {{braces}}.")
    res, out = build(runner, cli, tmp_path, TEMPLATED)
    assert res.exit_code == 0, res.output
    for r in pq.read_table(out / "t.parquet").to_pylist():
        gt = json.loads(r["reward_model"]["ground_truth"])
        x, expr = gt["tasks"][0]["input"], gt["tasks"][0]["expr"]
        want = (f"Code:\ndef main_solution(x):\n    return {expr}\nInput: {x}\n"
                f"Call main_solution({x!r}); literal {{braces}}.")
        assert r["prompt"][0]["content"] == want
        assert len(r["extra_info"]["prompt_template"]) == 16
    man = json.loads((out / "manifest.json").read_text())
    assert man["recipes"][0]["resolved"]["splits"]["t"]["prompt_template"]["file"] == "fwd.txt"
    res = runner.invoke(cli, ["validate", str(out)])
    assert res.exit_code == 0, res.output
    # the same rows without the template differ only in their prompts
    res, plain = build(runner, cli, tmp_path, TEMPLATED.replace("    prompt_template: fwd.txt\n", ""), "plain")
    assert res.exit_code == 0, res.output
    a, b = pq.read_table(out / "t.parquet").to_pylist(), pq.read_table(plain / "t.parquet").to_pylist()
    assert [r["reward_model"] for r in a] == [r["reward_model"] for r in b]
    assert all(x["prompt"] != y["prompt"] for x, y in zip(a, b))


@pytest.mark.parametrize(("text", "message"), [
    ("no program here {input}", "no {program} placeholder"),
    ("{program} {sources}", "unknown placeholder {sources}"),
    ("{program} {", "not a template"),
])
def test_bad_templates_name_the_field(runner, cli, tmp_path, text, message):
    (tmp_path / "fwd.txt").write_text(text)
    res, _ = build(runner, cli, tmp_path, TEMPLATED)
    assert res.exit_code == 2 and "splits.t.prompt_template" in res.output and message in res.output, res.output


def test_missing_template_file_is_a_clear_error(runner, cli, tmp_path):
    res, _ = build(runner, cli, tmp_path, TEMPLATED)
    assert res.exit_code == 2 and "splits.t.prompt_template: cannot read fwd.txt" in res.output


def test_an_unknown_prompt_format_raises_everywhere():
    from opgen import formats as F

    with pytest.raises(F.FormatError, match="unknown prompt format"):
        F.Formatter("closed_book_backward", "ra")
    with pytest.raises(F.FormatError, match="unknown prompt format"):
        F.mode_of("closed_book_backward")
    assert F.mode_of("closed_book_forward") == "forward" and F.DEFAULT_ANSWER["closed_book_forward"] == "json_output"
    for name, spec in F.PROMPTS.items():  # every format says what it is: no renderer branches on names
        assert spec.mode in ("program", "forward") and spec.answers and name in F.COMPATIBLE


def test_closed_book_forward_fast_path_equals_the_general_renderer():
    from opgen import expr as E
    from opgen import formats as F
    from opgen.rows import RowBuffer, RowSpec
    from opgen.tasks import Item, Task

    spec = RowSpec(split="s", family="f", kind="sft", prompt_format="closed_book_forward",
                   answer_format="json_output", recipe="r")
    for source, x in (("func_24(func_3(x), 2)", "hello"), ("func_7(x, 'ab')", "xyz")):
        tree = E.parse(source)
        item = Item((Task(tree, x, E.evaluate(tree, x)),))
        buf = RowBuffer(spec)
        buf.add(0, item)
        fmt = F.Formatter("closed_book_forward", "json_output")
        row = buf.table().to_pylist()[0]
        assert row["prompt"][0]["content"] == fmt.prompt(item, F.prepare(item))
        assert "def func_" not in row["prompt"][0]["content"]
        assert row["response"] == fmt.answer(item, F.prepare(item))


def test_stage1_is_output_prediction_with_bodies_shown(runner, cli, tmp_path):
    from opgen import ops

    out = tmp_path / "s1"
    res = runner.invoke(cli, ["build", "stage1", "--out", str(out), "--limit", "300"])
    assert res.exit_code == 0, res.output
    man = json.loads((out / "manifest.json").read_text())
    split = man["splits"]["train"]
    assert (split["prompt_format"], split["answer_format"], split["mode"]) == ("forward", "json_output", "forward")
    for r in pq.read_table(out / "train.parquet").to_pylist():
        text = r["prompt"][0]["content"]
        assert ops.get(r["extra_info"]["ops"][0]).source in text and "Recall" not in text
        assert r["ability"] == "code_io"


def test_call_distances_equal_the_expression_trees_tail_distances():
    from opgen import expr as E
    from opgen.generate import Context
    from opgen.generate.measure import call_distances
    from opgen.generate.trees import Trees

    gen = Trees(Trees.resolve({"ops": "all", "depths": [1, 2, 3, 5, 8], "rows": 600, "p_method": 0.2}),
                Context(digest="m", split="s", seed=0))
    for i in range(600):
        program = gen.first_valid(i)[1].tasks[0].program
        assert call_distances(program) == tuple((t.op, t.chars, t.call_tails) for t in E.tail_distances(program))


def test_scan_measured_is_scan_and_call_distances_in_one_walk():
    """The builder's one-walk fast path equals its two references on every kind of program."""
    from opgen import expr as E
    from opgen.formats import scan
    from opgen.generate import Context
    from opgen.generate.chains import Chains
    from opgen.generate.measure import scan_measured
    from opgen.generate.trees import Trees

    gens = [Trees(Trees.resolve({"ops": "all", "depths": [1, 2, 3, 5, 8], "rows": 500, "p_method": 0.2,
                                 "p_binary": 0.4}), Context(digest="m", split="s", seed=0)),
            Chains(Chains.resolve({"ops": "train", "depths": [1, 4, 20], "per_depth": 40}),
                   Context(digest="m", split="s", seed=0))]
    with E.recursion_headroom():
        for gen in gens:
            for i in range(gen.count()):
                program = gen.first_valid(i)[1].tasks[0].program
                a: dict[str, None] = {}
                b: dict[str, None] = {}
                text, depth, dist = scan_measured(program, a)
                assert (text, depth) == scan(program, b) and list(a) == list(b)
                assert dist == tuple((t.op, t.chars, t.call_tails) for t in E.tail_distances(program))
