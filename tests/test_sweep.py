"""Checkpoint sweeps: `opgen eval` with several models writes sweep.csv, sweep.json and plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import tiny_model as tm

from opgen import ops
from opgen.sweep import checkpoint_step

N = len(tm.TREES)
RECALL_BLOCKS = 8  # recall blocks over the gold answers of tm.TREES (1+2+2+1+1+1)


def _wrong(expression: str) -> str:
    return tm.ra_answer(expression).replace(f"return {expression}", "return func_3(x) + 'wrong'")


def _recall_swapped(answer: str, op: str, body_of: str, params: str) -> str:
    """Replace the *recall block* of ``op`` (not the assemble block) with another body under op's name."""
    src = ops.get(op).source
    fake = ops.get(body_of).source.replace(f"def {body_of}(", f"def {op}(")
    if params:
        fake = fake.replace(fake[fake.index("("):fake.index(")") + 1], f"({params})", 1)
    head, sep, tail = answer.partition("Assemble:")
    return head.replace(src, fake, 1) + sep + tail


def _checkpoint(folder: Path, n_correct: int, arity_row: int | None = None, chimera_row: int | None = None) -> Path:
    folder.mkdir(parents=True)
    lines = []
    for i, (e, _x) in enumerate(tm.TREES):
        answer = tm.ra_answer(e) if i < n_correct else _wrong(e)
        if i == arity_row:  # func_1 recalled without its n
            answer = _recall_swapped(answer, "func_1", "func_9", "s")
        if i == chimera_row:  # func_1 recalled with func_8's rotate body
            answer = _recall_swapped(answer, "func_1", "func_8", "")
        lines.append(json.dumps({"index": i, "response": answer}) + "\n")
    (folder / "trees_generations.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder


@pytest.fixture
def sweep_run(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    run = tmp_path / "run"
    # given out of order: the sweep sorts by step
    models = [_checkpoint(run / "step30", N), _checkpoint(run / "step10", 2, arity_row=3),
              _checkpoint(run / "step20", 4, chimera_row=5)]
    args = ["eval", "--backend", "replay", "--quiet", "--data", str(data)]
    for m in models:
        args += ["--model", str(m)]

    def go(out: Path):
        res = runner.invoke(cli, [*args, "--out", str(out)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return res

    return go, tmp_path


@pytest.mark.slow
def test_sweep_table_has_one_row_per_checkpoint_in_step_order(sweep_run):
    go, tmp = sweep_run
    res = go(tmp / "out")
    assert "sweep:" in res.output
    with open(tmp / "out" / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["model"] for r in rows] == ["step10", "step20", "step30"]
    assert [int(r["step"]) for r in rows] == [10, 20, 30]
    assert [float(r["accuracy"]) for r in rows] == pytest.approx([2 / N, 4 / N, 1.0])
    for r in rows:
        assert float(r["accuracy_ci_low"]) <= float(r["accuracy"]) <= float(r["accuracy_ci_high"])
        assert int(r["accuracy_n"]) == N
    assert [float(r["arity_error_rate_all_ops"]) for r in rows] == pytest.approx([1 / RECALL_BLOCKS, 0, 0])
    assert [float(r["chimera_rate"]) for r in rows] == pytest.approx([0, 1 / RECALL_BLOCKS, 0])
    # by depth: rows 0 and 3 have depth 1, the rest depth 2; step10 got rows 0-1 right
    assert float(rows[0]["acc[d=1]"]) == pytest.approx(1 / 2) and float(rows[0]["acc[d=2]"]) == pytest.approx(1 / 4)
    assert float(rows[0]["acc[test]"]) == pytest.approx(2 / N)


@pytest.mark.slow
def test_sweep_json_matches_the_table_and_plots_are_pngs(sweep_run):
    go, tmp = sweep_run
    go(tmp / "out")
    rows = json.loads((tmp / "out" / "sweep.json").read_text())
    assert [r["model"] for r in rows] == ["step10", "step20", "step30"]
    assert rows[1]["overall"]["acc"] == pytest.approx(4 / N)
    assert set(rows[0]["by_depth"]) == {"1", "2"}
    for png in ("sweep_accuracy.png", "sweep_depth.png"):
        assert (tmp / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_sweep_files_are_reproducible(sweep_run):
    go, tmp = sweep_run
    go(tmp / "a")
    go(tmp / "b")
    for name in ("sweep.csv", "sweep.json", "sweep_accuracy.png", "sweep_depth.png"):
        assert (tmp / "a" / name).read_bytes() == (tmp / "b" / name).read_bytes(), name


def test_one_model_writes_no_sweep(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    m = _checkpoint(tmp_path / "step5", N)
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--quiet", "--model", str(m), "--data", str(data),
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "out" / "sweep.csv").exists()


@pytest.mark.parametrize("name,step", [("rl-mda-step50", 50), ("checkpoint-200", 200), ("global_step_40", 40),
                                       ("120", 120), ("sft-eco-s1", None), ("step10_ckpt-20", 20)])
def test_checkpoint_step_from_name(name, step):
    assert checkpoint_step(name) == step


def test_sweep_without_matplotlib_is_one_line_and_the_tables_are_written(sweep_run, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    go, tmp = sweep_run
    res = go(tmp / "out")
    assert "Traceback" not in res.output
    assert [ln for ln in res.output.splitlines() if "matplotlib" in ln and ln.startswith("warning")] == [
        "warning: plots skipped: matplotlib is not installed (pip install 'opgen[plots]'); "
        "every model's scores and summaries and the sweep tables are complete"]
    assert (tmp / "out" / "sweep.csv").is_file() and (tmp / "out" / "sweep.json").is_file()
    assert not list((tmp / "out").glob("sweep_*.png"))


@pytest.mark.slow
def test_a_sweep_adds_summaries_and_recomputes_an_older_one_from_its_scores_line_by_line(sweep_run, monkeypatch):
    """Issue 32 item 2: a sweep reads each model's metrics.json, never its responses; a summary of
    before the tables it adds existed is recomputed from scores.jsonl, one line at a time."""
    from opgen import sweep

    go, tmp = sweep_run
    go(tmp / "out")
    metrics = sweep.load_metrics(tmp / "out")
    expected = json.loads((tmp / "out" / "sweep.json").read_text())

    def never(path):
        raise AssertionError(f"the sweep read {path}")

    with monkeypatch.context() as m:
        m.setattr(sweep, "_scores_lines", never)
        assert json.loads(json.dumps(sweep.build_sweep(tmp / "out", metrics))) == expected
    for model in metrics:  # as an eval of before intervals by row wrote it
        for entry in model["data"].values():
            del entry["summary"]["metric_definitions"]["interval"]
            entry["summary"]["arity_by_distance"] = {}
    assert json.loads(json.dumps(sweep.build_sweep(tmp / "out", metrics))) == expected
