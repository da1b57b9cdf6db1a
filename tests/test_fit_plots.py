"""Plots never cost `opgen fit` its results: fit.json is complete before any plot is tried, a curve with
a parameter that is not a finite number is not drawn (and the output says so), a plotting error is one
warning line, and without matplotlib the fit still writes everything else."""

from __future__ import annotations

import json
import sys

import fit_fixtures as F
import pytest

pytest.importorskip("scipy")
pytestmark = pytest.mark.filterwarnings("ignore::scipy.optimize.OptimizeWarning", "ignore::RuntimeWarning")

FIVE = dict(list(F.TOKENS_B.items())[:5])


def _fit(tmp_path, *extra):
    from click.testing import CliRunner
    from opgen.cli import cli

    root = F.write_reference(tmp_path / "ref", tokens=FIVE, short=(), steps_=(100, 120, 140, 160, 180))
    out = tmp_path / "fit"
    res = CliRunner().invoke(cli, ["fit", "--reference", str(root), "--out", str(out), "--resamples", "20", *extra])
    return res, out


@pytest.mark.slow
def test_five_run_layout_with_a_power_law_without_d_plots_and_says_what_it_left_out(tmp_path):
    pytest.importorskip("matplotlib")
    res, out = _fit(tmp_path)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    doc = json.loads((out / "fit.json").read_text())
    missing = [(sp, r["run"]) for sp, s in doc["splits"].items() for r in s["runs"]
               if r["backtest"]["forms"].get("power", {}).get("fit_params", {}).get("D", 0) is None
               or r["forms"]["power"]["params"]["D"]["estimate"] is None]
    assert missing, "the layout no longer produces a power law whose D overflows"
    sp, run = missing[0]
    assert any(f"{sp}/{run} power curve not drawn: D is not a finite number" in w for w in doc["warnings"])
    assert "power curve not drawn" in res.output
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "fit_curves_b1b2.png" in pngs and "fit_curves_b3b4.png" in pngs
    assert sorted(doc["outputs"]) == sorted(["fit_runs.csv", "fit_windows.csv", *pngs])


def test_a_plot_that_fails_is_one_warning_and_fit_json_is_written(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from opgen.fit import report

    def boom(*_a, **_k):
        raise ValueError("synthetic plotting failure")

    monkeypatch.setattr(report, "_plot_slopes", boom)
    res, out = _fit(tmp_path, "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "fit.json").read_text())
    assert [w for w in doc["warnings"] if "not drawn" in w] == [
        "plot fit_slope_vs_tokens_b1b2.png not drawn: ValueError: synthetic plotting failure",
        "plot fit_slope_vs_tokens_b3b4.png not drawn: ValueError: synthetic plotting failure"]
    assert not list(out.glob("fit_slope_*.png")) and (out / "fit_curves_b1b2.png").is_file()


def test_fit_json_is_on_disk_before_the_first_plot(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from opgen.fit import report

    seen = []
    real = report._plot_curves

    def spy(result, split, sp, path, notes):
        seen.append(json.loads((path.parent / "fit.json").read_text())["splits"][split]["runs"][0]["run"])
        return real(result, split, sp, path, notes)

    monkeypatch.setattr(report, "_plot_curves", spy)
    res, _out = _fit(tmp_path, "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    assert seen == ["0.5B", "0.5B"]


def test_without_matplotlib_one_line_names_the_extra_and_fit_json_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res, out = _fit(tmp_path, "--forms", "linear_log")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if "matplotlib" in ln and not ln.startswith("wrote ")]
    assert lines == ["warning: plots skipped: matplotlib is not installed (pip install 'opgen[plots]'); "
                     "fit.json and the CSVs are complete"]
    doc = json.loads((out / "fit.json").read_text())
    assert doc["outputs"] == ["fit_runs.csv", "fit_windows.csv"] and not list(out.glob("*.png"))
