"""`opgen fit` says what it found (issue 36 item 3): every fitted curve's shape (decaying, flat,
growing), a warning in plain words when a shape contradicts the expected direction (accuracy should
not fall as RL compute grows; a level should fall as pretraining loss rises), duplicated tidy rows
refused by name, and an unusable --out refused before any input is read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fit_fixtures as F
import pytest

pytest.importorskip("scipy")

STEPS = (10, 20, 40, 80, 160)


def _fit(runner, cli, *args):
    return runner.invoke(cli, ["fit", *args], catch_exceptions=False)


def test_duplicated_tidy_rows_are_an_error_naming_both(runner, cli, tmp_path):
    rows = [["a", s, "all", 3 + j, 10] for j, s in enumerate(STEPS)] + [["a", 40, "all", 9, 10]]
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step")
    assert res.exit_code == 2, res.output
    assert f"{path}: row 7: the same cell as row 4 (run 'a', seed 0, split 'all', step 40)" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()
    # told apart by a cluster column, the same two rows are two cells
    rows = [["a", s, "all", "c1", 3 + j, 10] for j, s in enumerate(STEPS)] + [["a", 40, "all", "c2", 9, 10]]
    path = F.write_tidy(tmp_path / "c.csv", rows, ("run", "step", "split", "cluster", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "c"), "--compute", "step",
               "--resamples", "0", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output


def test_each_fitted_curve_has_its_shape_and_a_falling_one_is_said(runner, cli, tmp_path):
    rows = [["up", s, "all", 20 + 10 * j, 100] for j, s in enumerate(STEPS)]
    rows += [["down", s, "all", 70 - 12 * j, 100] for j, s in enumerate(STEPS)]
    rows += [["level", s, "all", 50, 100] for s in STEPS]
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "n_correct", "n_total"))
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step",
               "--resamples", "20", "--no-plots")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    runs = {r["run"]: r for r in doc["splits"]["all"]["runs"]}
    assert runs["up"]["forms"]["linear_log"]["shape"] == "growing"
    assert runs["down"]["forms"]["linear_log"]["shape"] == "decaying"
    assert runs["down"]["forms"]["linear_log"]["change"] < 0
    assert runs["level"]["forms"]["linear_log"]["shape"] == "flat"
    assert runs["down"]["forms"]["power"]["shape"] in ("flat", "growing")  # A − D·C^−B, D ≥ 0, cannot fall
    falling = [w for w in doc["warnings"] if "decaying fit" in w]
    assert len(falling) == 1 and falling[0].startswith("all/down: decaying fit: linear_log (R_ref = ")
    assert "accuracy falls as RL compute grows, against the expected direction" in falling[0]
    assert "warning: all/down: decaying fit" in res.output
    assert "linear_log [decaying]: " in res.output and "linear_log [growing]: " in res.output


def _levels_rising_with_loss(tmp_path: Path) -> Path:
    """Four runs whose accuracy is higher the higher their pretraining loss (a subset where the
    expected relation is reversed)."""
    rows = []
    for i, (run, loss) in enumerate((("a", 3.0), ("b", 3.2), ("c", 3.5), ("d", 3.9))):
        for j, s in enumerate(STEPS):
            rows.append([run, s, "all", 10 + 12 * i + 4 * j, 100, 10 ** (9 + i), loss])
    return F.write_tidy(tmp_path / "rising.csv", rows)


def test_an_exponential_growing_with_loss_says_so_without_reference(runner, cli, tmp_path):
    path = _levels_rising_with_loss(tmp_path)
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step",
               "--resamples", "20", "--no-plots", "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    ex = doc["splits"]["all"]["across"]["R_ref_vs_loss"]["exp_fit"]
    assert ex["shape"] == "growing" and ex["change"] > 0
    said = [w for w in doc["warnings"] if "vs loss: the exponential fit is growing" in w]
    assert len(said) == 1, doc["warnings"]
    assert said[0].startswith("all: R_ref vs loss: the exponential fit is growing (alpha = ")
    assert "linear_log.R_ref rises with pretraining loss" in said[0]
    assert "against the expected direction (lower loss, higher accuracy)" in said[0]
    assert "warning: all: R_ref vs loss: the exponential fit is growing" in res.output


def test_the_reference_exponential_and_its_alternative_carry_their_shape(runner, cli, tmp_path):
    path = _levels_rising_with_loss(tmp_path)
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(tmp_path / "o"), "--compute", "step",
               "--resamples", "0", "--no-plots", "--forms", "linear_log", "--like-reference")
    assert res.exit_code == 0, res.output
    ex = json.loads((tmp_path / "o" / "fit.json").read_text())["splits"]["all"]["across"]["R_ref_vs_loss"]["exp_fit"]
    assert all(a["shape"] == "growing" for a in ex["alternatives"])
    assert "branch" not in json.dumps(ex)


def test_an_unusable_out_is_refused_before_any_input_is_read(runner, cli, tmp_path):
    rows = [["a", s, "all", 3 + j, 10] for j, s in enumerate(STEPS)]
    path = F.write_tidy(tmp_path / "t.csv", rows, ("run", "step", "split", "n_correct", "n_total"))
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    res = _fit(runner, cli, "--tidy", str(path), "--out", str(foreign), "--compute", "step", "--progress")
    assert res.exit_code == 1, res.output
    assert "notes.txt" in res.output and "reading the input" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project", "t.csv"]  # no lock, no staging left
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            res = _fit(runner, cli, "--tidy", str(path), "--out", str(ro / "o"), "--compute", "step", "--progress")
            assert res.exit_code == 1 and "not writable" in res.output and "reading the input" not in res.output
        finally:
            ro.chmod(0o755)
