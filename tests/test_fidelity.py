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
