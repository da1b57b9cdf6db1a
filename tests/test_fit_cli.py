"""`opgen fit` end to end: `opgen eval --backend replay` over a synthetic sweep, then `opgen fit` on its
output folder with a runs table; tidy tables; the Hub reader (offline); bad input; determinism."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import fit_fixtures as F
import pytest

pytest.importorskip("scipy")

STEPS = (10, 20, 40, 80, 160)
CURVES = {"r1": lambda s: 0.1 + 0.2 * math.log10(s / 10), "r2": lambda s: 0.2 + 0.15 * math.log10(s / 10)}
RUN_ATTRS = {"r1": {"tokens": 1e9, "loss": 3.9}, "r2": {"tokens": 4e9, "loss": 3.5}}
N_ROWS = 24


def _schema():
    from opgen.resources import schema_path

    return json.loads(schema_path("fit.schema.json").read_text())


def _fit(runner, cli, *args):
    return runner.invoke(cli, ["fit", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from click.testing import CliRunner
    from opgen.cli import cli

    root = tmp_path_factory.mktemp("sweep")
    data, models = F.replay_sweep(root, CURVES, STEPS, n_rows=N_ROWS)
    args = ["eval", "--backend", "replay", "--quiet", "--data", str(data), "--out", str(root / "out")]
    for m in models:
        args += ["--model", str(m)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    table = root / "runs.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "seed", "model", "step", "tokens", "loss", "params", "prompts_per_step", "group"])
        for run in CURVES:
            for s in STEPS:
                w.writerow([run, 1, f"{run}_step{s}", s, RUN_ATTRS[run]["tokens"], RUN_ATTRS[run]["loss"],
                            "20.5e6", 64, 4])
    return root


def test_eval_then_fit_writes_every_output_and_fit_json_validates(runner, cli, sweep):
    import jsonschema

    out = sweep / "fit"
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(sweep / "runs.csv"), "--out", str(out),
               "--cluster-by", "prompt", "--resamples", "200", "--holdout-frac", "0.4")
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "fit.json").read_text())
    jsonschema.validate(doc, _schema())
    for name in doc["outputs"]:
        assert (out / name).is_file(), name
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["fit_curves_test.png", "fit_slope_vs_tokens_test.png"] or "fit_curves_test.png" in pngs
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    runs = {r["run"]: r for r in doc["splits"]["test"]["runs"]}
    assert sorted(runs) == ["r1", "r2"]
    for run, curve in CURVES.items():
        r = runs[run]
        assert r["steps"] == list(STEPS) and r["n"] == [N_ROWS] * len(STEPS)
        assert r["acc"] == pytest.approx([round(N_ROWS * curve(s)) / N_ROWS for s in STEPS])
        # C_RL = step x 10 N x prompts x group x (prompt + response tokens), token means from metrics.json
        per_step = doc["compute"]["per_run"][run]["per_step"]
        assert doc["compute"]["per_run"][run]["from_metrics_json"] == ["prompt_tokens", "response_tokens"]
        assert per_step == pytest.approx(10 * 20.5e6 * 64 * 4 * (100 + 300))
        assert r["compute"] == pytest.approx([s * per_step for s in STEPS])
        lin = r["forms"]["linear_log"]["params"]
        assert lin["B"]["ci_low"] < lin["B"]["estimate"] < lin["B"]["ci_high"]
        assert lin["B"]["estimate"] > 0
        assert r["backtest"]["n_heldout"] == 2 and r["backtest"]["n_fit"] == 3
        assert r["loss"] == RUN_ATTRS[run]["loss"]
    assert doc["uncertainty"]["method"] == "cluster" and doc["uncertainty"]["n_clusters"] == N_ROWS
    assert doc["seeds"] == {"r1": [1], "r2": [1]}
    paths = {Path(i["path"]).name for i in doc["inputs"]}
    assert {"metrics.json", "scores.jsonl", "runs.csv"} <= paths
    with open(out / "fit_runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["run"], r["form"], r["param"]) for r in rows} >= {("r1", "linear_log", "B"), ("r2", "sigmoid", "A")}
    # two runs: the across-run statistics carry a warning and no p-value
    b = doc["splits"]["test"]["across"]["B_vs_log10_tokens"]["pearson"]
    assert b["n"] == 2 and b["p"] is None and b["warning"]


def test_cluster_by_operator_set_reads_the_data_files(runner, cli, sweep):
    out = sweep / "fit_ops"
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(sweep / "runs.csv"), "--out", str(out),
               "--resamples", "50", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "fit.json").read_text())
    # tiny_model.TREES use three operator sets: {func_3}, {func_1, func_3}, {func_1}
    assert doc["uncertainty"]["cluster_by"] == "ops" and doc["uncertainty"]["n_clusters"] == 3
    assert any(Path(i["path"]).name == "trees.parquet" for i in doc["inputs"])


@pytest.mark.slow
def test_same_seed_same_bytes_other_seed_other_intervals(runner, cli, sweep):
    args = ["--sweep", str(sweep / "out"), "--runs", str(sweep / "runs.csv"), "--cluster-by", "prompt",
            "--resamples", "100", "--no-plots", "--forms", "linear_log,power"]
    outs = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        res = _fit(runner, cli, *args, "--out", str(sweep / f"det_{name}"), "--seed", seed)
        assert res.exit_code == 0, res.output
        outs.append((sweep / f"det_{name}" / "fit.json").read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def test_without_a_runs_table_each_sweep_folder_is_one_run(runner, cli, sweep, tmp_path):
    import shutil

    # both runs' checkpoints in one folder: one run "out" would see every step twice
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--out", str(tmp_path / "o"), "--compute", "step")
    assert res.exit_code == 2 and "step 10 is given twice (r1_step10 and r2_step10)" in res.output
    only = tmp_path / "only_r1"
    for s in STEPS:
        shutil.copytree(sweep / "out" / f"r1_step{s}", only / f"r1_step{s}")
    res = _fit(runner, cli, "--sweep", str(only), "--out", str(tmp_path / "o"), "--compute", "step",
               "--cluster-by", "family", "--resamples", "20", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    [run] = doc["splits"]["test"]["runs"]
    assert run["run"] == "only_r1" and run["steps"] == list(STEPS) and doc["compute"]["definition"] == "step"
    assert doc["compute"]["c_ref"] == 1.0


def test_yaml_runs_table(runner, cli, sweep, tmp_path):
    import yaml

    doc = {"runs": {run: {**RUN_ATTRS[run], "params": 20.5e6, "prompts_per_step": 64, "group": 4,
                          "prompt_tokens": 50, "response_tokens": 150,
                          "checkpoints": [{"model": f"{run}_step{s}", "step": s} for s in STEPS]}
                    for run in CURVES}}
    table = tmp_path / "runs.yaml"
    table.write_text(yaml.safe_dump(doc))
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(table), "--out", str(tmp_path / "o"),
               "--resamples", "20", "--no-plots", "--forms", "linear_log", "--cluster-by", "prompt")
    assert res.exit_code == 0, res.output
    fit = json.loads((tmp_path / "o" / "fit.json").read_text())
    # the table's token means win over metrics.json's
    assert fit["compute"]["per_run"]["r1"]["per_step"] == pytest.approx(10 * 20.5e6 * 64 * 4 * (50 + 150))


def test_tidy_table_with_given_compute(runner, cli, tmp_path):
    rows = []
    for i, run in enumerate(("a", "b", "c", "d")):
        for j, c in enumerate((1e18, 2e18, 4e18, 8e18, 1.6e19)):
            rows.append([run, c, "all", 20 + 10 * j + 3 * i, 200, 10 ** (9 + i), 4 - 0.2 * i])
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "compute", "split", "n_correct", "n_total", "tokens", "loss"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--resamples", "50", "--no-plots")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert doc["compute"]["definition"] == "given" and doc["uncertainty"]["method"] == "binomial"
    assert [r["run"] for r in doc["splits"]["all"]["runs"]] == ["a", "b", "c", "d"]
    assert doc["splits"]["all"]["runs"][0]["c_ref_decades_beyond_data"] == pytest.approx(20 - math.log10(1.6e19))


def test_fit_window_keeps_only_the_steps_inside_it(runner, cli, tmp_path):
    rows = [[run, s, "all", 10 + j * 5 + i, 100, None, None] for i, run in enumerate("ab")
            for j, s in enumerate((10, 20, 40, 80, 160))]
    path = F.write_tidy(tmp_path / "t.csv", rows)
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step", "--min-step", "20",
               "--max-step", "80", "--resamples", "20", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert doc["window"] == {"min_step": 20, "max_step": 80}
    assert [r["steps"] for r in doc["splits"]["all"]["runs"]] == [[20, 40, 80], [20, 40, 80]]


@pytest.mark.parametrize("rows,header,needle", [
    ([["a", 10, "x", 3, 10]], ("run", "step", "split", "n_correct"), "no 'n_total' column"),
    ([["a", 10, "x", 11, 10]], ("run", "step", "split", "n_correct", "n_total"), "row 2: n_correct = 11"),
    ([["a", "ten", "x", 1, 10]], ("run", "step", "split", "n_correct", "n_total"), "row 2: step must be a number"),
    ([["a", 10, "x", 1, 10, 1e9], ["a", 20, "x", 1, 10, 2e9]], ("run", "step", "split", "n_correct", "n_total",
                                                              "tokens"), "row 3: run 'a' has tokens"),
])
def test_bad_tidy_tables_name_the_row_and_field_and_exit_2(runner, cli, tmp_path, rows, header, needle):
    path = F.write_tidy(tmp_path / "bad.csv", rows, header)
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step")
    assert res.exit_code == 2, res.output
    assert needle in res.output and str(path) in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "o" / "fit.json").exists()


def test_bad_sweeps_exit_2_naming_the_file(runner, cli, sweep, tmp_path):
    table = tmp_path / "runs.csv"
    table.write_text("run,model,step\nr1,r1_step999,999\n")
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(table), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "'r1_step999' is in none of the sweep folders" in res.output
    broken = tmp_path / "broken" / "m_step10"
    broken.mkdir(parents=True)
    (broken / "metrics.json").write_text("{not json")
    res = _fit(runner, cli, "--sweep", str(tmp_path / "broken"), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and str(broken / "metrics.json") in res.output
    table.write_text("run,model,step\nr1,r1_step10,10\n")
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(table), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "compute 'rollout' needs params" in res.output


def test_input_choice_is_a_usage_error(runner, cli, tmp_path):
    res = _fit(runner, cli, "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "exactly one input" in res.output
    res = _fit(runner, cli, "--tidy", "a.csv", "--reference", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "--tidy, --reference" in res.output
    res = _fit(runner, cli, "--reference", str(tmp_path), "--out", str(tmp_path / "o"), "--forms", "cubic")
    assert res.exit_code == 2 and "unknown form 'cubic'" in res.output


def test_reference_layout_errors(runner, cli, tmp_path):
    res = _fit(runner, cli, "--reference", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "no results/ folder" in res.output
    root = F.write_reference(tmp_path / "ref")
    bad = root / "results" / "t2" / "rl_20m_1B_s50.json"
    bad.write_text(json.dumps({"summary": {}}))
    res = _fit(runner, cli, "--reference", str(root), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and f"{bad}: no summary.pass1_mean_overall" in res.output


def test_hub_repo_reads_the_reference_layout_through_huggingface_hub(runner, cli, tmp_path, monkeypatch):
    import huggingface_hub

    root = F.write_reference(tmp_path / "snapshot")
    calls = []

    def fake_snapshot_download(repo_id, repo_type=None, revision=None, allow_patterns=None):
        calls.append((repo_id, repo_type, tuple(allow_patterns)))
        return str(root)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    res = _fit(runner, cli, "--hub-repo", "ORG/results", "--out", str(tmp_path / "o"), "--resamples", "20",
               "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    assert calls == [("ORG/results", "dataset", ("results/t2/*", "results/t2b/*", "results/loss/loss_model_20m_*"))]
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert doc["source"] == "hub:ORG/results" and sorted(doc["splits"]) == ["b1b2", "b3b4"]


def test_scipy_is_imported_only_inside_opgen_fit():
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    pattern = re.compile(r"^\s*(import scipy|from scipy)", re.MULTILINE)
    offenders = [str(p.relative_to(root)) for folder in ("opgen", "cli") for p in (root / folder).rglob("*.py")
                 if "fit" not in p.relative_to(root).parts[1:2] and pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
    code = ("import sys; from click.testing import CliRunner; from opgen.cli import cli; "
            "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0 and 'fit' in r.output; "
            "r = CliRunner().invoke(cli, ['fit', '--help']); assert r.exit_code == 0; "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_tidy_cluster_column_and_rates_read_as_counts(runner, cli, tmp_path):
    rows = []
    for i, run in enumerate(("a", "b", "c")):
        for j, s in enumerate((10, 20, 40, 80, 160)):
            for cl in range(6):
                rows.append([run, s, "all", cl, (2 + j + i + cl % 3), 10])
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "cluster", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step", "--resamples",
               "30", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert doc["uncertainty"]["method"] == "cluster" and doc["uncertainty"]["n_clusters"] == 6
    assert doc["splits"]["all"]["runs"][0]["n"] == [60] * 5
    assert any("only 6 clusters" in w for w in doc["warnings"])
    # the reference layout's rates, read as 512 answers each: binomial weights and draws
    root = F.write_reference(tmp_path / "ref")
    res = _fit(runner, cli, "--reference", str(root), "--out", str(tmp_path / "r"), "--assume-n", "512",
               "--resamples", "30", "--no-plots", "--forms", "linear_log", "--weights", "binomial")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "fit.json").read_text())
    assert doc["weights"] == "binomial" and doc["uncertainty"]["method"] == "binomial"
    assert doc["splits"]["b3b4"]["runs"][0]["n"] == [512] * 5


def test_bad_runs_tables_name_the_field(runner, cli, sweep, tmp_path):
    table = tmp_path / "runs.yaml"
    table.write_text("runs:\n  r1:\n    tokns: 1e9\n    checkpoints: [{model: r1_step10}]\n")
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(table), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "runs.r1: unknown field 'tokns'" in res.output
    table.write_text("runs:\n  r1:\n    loss: low\n    checkpoints: [{model: r1_step10}]\n")
    res = _fit(runner, cli, "--sweep", str(sweep / "out"), "--runs", str(table), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "loss must be a number, not 'low'" in res.output


def test_unfinished_checkpoints_are_named_and_rows_without_answers_are_not_zero(runner, cli, sweep, tmp_path):
    """#24: a model folder without metrics.json is left out by name; a tidy row with n_total = 0 is
    left out (it has no rate), not read as 0% correct."""
    import shutil

    only = tmp_path / "only_r1"
    for s in STEPS:
        shutil.copytree(sweep / "out" / f"r1_step{s}", only / f"r1_step{s}")
    (only / "r1_step320").mkdir()  # generation under way: no metrics.json yet
    (only / "r1_step320" / "trees_generations.jsonl").write_text("")
    res = _fit(runner, cli, "--sweep", str(only), "--out", str(tmp_path / "o"), "--compute", "step",
               "--cluster-by", "family", "--resamples", "20", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert any("1 unfinished checkpoint(s) left out (no metrics.json): r1_step320" in w for w in doc["warnings"])
    assert "r1_step320" in res.output

    rows = [["a", s, "all", 5, 10] for s in (10, 20, 40, 80)] + [["a", 160, "all", 0, 0]]
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "t"), "--compute", "step",
               "--resamples", "0", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "t" / "fit.json").read_text())
    [run] = doc["splits"]["all"]["runs"]
    assert run["steps"] == [10, 20, 40, 80] and run["acc"] == [0.5] * 4
    assert any("1 row(s) with n_total = 0 (no answers) left out, not counted as 0%: row 6" in w
               for w in doc["warnings"])


def test_progress_names_each_stage_and_run(runner, cli, tmp_path):
    rows = [[run, s, "all", 3 + j, 10] for run in ("a", "b") for j, s in enumerate((10, 20, 40, 80))]
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step",
               "--resamples", "10", "--no-plots", "--forms", "linear_log", "--progress")
    assert res.exit_code == 0, res.output
    for needle in ("reading the input", "2 run curve(s) from 8 cell(s); 10 bootstrap resample(s)",
                   "fitting all/a (1/2)", "fitting all/b (2/2)", "across runs: all", "writing fit.json"):
        assert needle in res.output, needle
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o2"), "--compute", "step",
               "--resamples", "10", "--no-plots", "--forms", "linear_log", "--no-progress")
    assert "fitting all/a" not in res.output
