"""`opgen fit --reference`: on the reference analysis's own layout every claim it makes — per-run
R_ref and B (and the step-only pair), Spearman of R_ref on loss with its p-value, the exponential fit
from curve_fit's start point, the measured last-checkpoint correlations, Pearson/Spearman of B on log
tokens with the polyfit line — equals what the reference script itself computes (its code executed,
tests/rl_scaling_reference.py) on several synthetic layouts."""

from __future__ import annotations

import json
import math

import fit_fixtures as F
import numpy as np
import pytest
import rl_scaling_reference as REF

pytest.importorskip("scipy")
pytestmark = pytest.mark.filterwarnings("ignore::scipy.optimize.OptimizeWarning",
                                        "ignore::RuntimeWarning")

TOL = 1e-9  # fit.json holds 12 significant digits: absolute below 1, relative above


def close(a, b) -> bool:
    if a is None or b is None or (isinstance(b, float) and math.isnan(b)):
        return (a is None) and (b is None or math.isnan(b))
    return abs(a - b) <= TOL * max(1.0, abs(b))


FIRST = list(F.TOKENS_B.items())
LAYOUTS = {
    # name: (write_reference keyword arguments, extra opgen fit arguments)
    "7_runs_one_short": ({}, []),
    "4_runs": ({"tokens": dict(FIRST[:4]), "short": ()}, []),
    "5_runs_power_without_D": ({"tokens": dict(FIRST[:5]), "short": (), "steps_": (100, 120, 140, 160, 180)}, []),
    "runs_without_loss": ({"no_loss": (2.0, 16.0), "seed": 3}, []),
    "3_runs_with_loss": ({"tokens": dict(FIRST[:5]), "short": (), "no_loss": (1.0, 4.0)}, []),
    "counts_assumed": ({"seed": 5}, ["--assume-n", "512"]),
}


def test_the_executed_code_is_the_reference_text():
    text = REF.reference_text()
    assert text is not None
    flat = REF.flat(text)
    assert REF.flat(REF.ANALYZE) in flat
    for line in REF.PRELUDE.strip().splitlines():  # constants and imports, as the script has them
        assert REF.flat(line) in flat
    # the loaders' bodies apart from the Hub listing
    for frag in ('runs.setdefault((subset, tok_b), {})[step] = d["summary"]["pass1_mean_overall"]',
                 'subset = "b1b2" if tag.startswith("t2b_") else "b3b4"',
                 'losses[round(tok_b, 2)] = d["val_loss"]', 'tok_b = d.get("pretrain_tokens", 0) / 1e9'):
        assert frag in flat
    # main()'s loop, which REF.run repeats
    assert 'for subset in ("b1b2", "b3b4"): sub = {t: curve for (s, t), curve in runs.items() if s == subset}' in flat


# The fast loop fits two layouts (one with losses); the others are slow.
FAST_LAYOUTS = ("3_runs_with_loss", "4_runs")


@pytest.fixture(scope="module", params=[name if name in FAST_LAYOUTS else pytest.param(name, marks=pytest.mark.slow)
                                        for name in sorted(LAYOUTS)])
def fitted(request, tmp_path_factory):
    from click.testing import CliRunner
    from opgen.cli import cli

    kwargs, extra = LAYOUTS[request.param]
    root = F.write_reference(tmp_path_factory.mktemp(request.param), **kwargs)
    out = root / "fit"
    res = CliRunner().invoke(cli, ["fit", "--reference", str(root), "--out", str(out), "--resamples", "20",
                                   "--no-plots", *extra], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return request.param, json.loads((out / "fit.json").read_text()), REF.run(root)


def test_reference_defaults_are_recorded(fitted):
    name, ours, _ref = fitted
    assert ours["like_reference"] is True
    assert ours["weights"] == "ols"  # with counts too: the reference fits rates unweighted


def test_per_run_fits_equal_the_reference(fitted):
    name, ours, ref = fitted
    assert sorted(ours["splits"]) == sorted(ref)
    for subset, r in ref.items():
        runs = {run["tokens"] / 1e9: run for run in ours["splits"][subset]["runs"]}
        assert sorted(runs) == [p["tokens"] for p in r["per_run"]]  # the same runs kept (2-step runs skipped)
        for p in r["per_run"]:
            mine = runs[p["tokens"]]
            assert mine["steps"] == p["steps"]
            assert all(close(a, b) for a, b in zip(mine["acc"], p["pass1"]))
            lin = mine["forms"]["linear_log"]["params"]
            assert close(lin["R_ref"]["estimate"], p["R_ref"]) and close(lin["B"]["estimate"], p["B"])
            step = mine["step_only"]["params"]
            assert close(step["R_ref"]["estimate"], p["R_ref_step"]) and close(step["B"]["estimate"], p["B_step"])
            assert mine["loss"] == p["loss"]


def test_every_claim_equals_the_reference(fitted):
    name, ours, ref = fitted
    for subset, r in ref.items():
        across = ours["splits"][subset]["across"]
        if "claim_R_ref_vs_loss" not in r:  # fewer than 4 runs with a loss: no claim, here either
            assert across == {}, name
            assert any(f"{subset}:" in w and "no across-run claim" in w for w in ours["warnings"])
            continue
        c = r["claim_R_ref_vs_loss"]
        a = across["R_ref_vs_loss"]
        done = [p["tokens"] for p in r["per_run"] if p["loss"] is not None]
        assert sorted(float(x[:-1]) for x in a["runs"]) == sorted(done)  # only runs with a loss
        assert a["spearman"]["n"] == len(done)
        assert close(a["spearman"]["estimate"], c["spearman_rho"]) and close(a["spearman"]["p"], c["spearman_p"])
        ex = a["exp_fit"]
        if c["exp_fit"] is None:
            assert ex["failed"]
        else:
            for k in ("alpha", "beta", "gamma"):
                assert close(ex[k]["estimate"], c["exp_fit"][k]), (name, k, ex[k], c["exp_fit"][k])
            assert close(ex["R2"], c["exp_fit"]["R2"])
        m = r["claim_R_ref_vs_loss_measured"]
        last = across["acc_last_vs_loss"]
        assert close(last["spearman"]["estimate"], m["spearman_rho"]) and close(last["spearman"]["p"], m["spearman_p"])
        assert close(last["pearson"]["estimate"], m["pearson_r"]) and close(last["pearson"]["p"], m["pearson_p"])
        b = r["claim_B_vs_logT"]
        bt = across["B_vs_log10_tokens"]
        assert sorted(float(x[:-1]) for x in bt["runs"]) == sorted(done)  # a loss is needed here too
        assert close(bt["pearson"]["estimate"], b["pearson_r"]) and close(bt["pearson"]["p"], b["p"])
        assert close(bt["spearman"]["estimate"], b["spearman_rho"])
        lf = bt["linear_fit"]
        assert close(lf["slope"]["estimate"], b["linear_fit"]["slope_per_decade_tokens"])
        assert close(lf["intercept"]["estimate"], b["linear_fit"]["intercept"])
        assert close(lf["R2"], b["linear_fit"]["R2"])


def test_p_values_are_shown_beside_n_below_six_runs(fitted):
    name, ours, ref = fitted
    for subset, sp in ours["splits"].items():
        for key, a in sp["across"].items():
            for kind in ("spearman", "pearson"):
                if kind in a and a[kind]["estimate"] is not None:
                    assert a[kind]["p"] is not None, (name, subset, key, kind)
                    assert a[kind]["n"] == len(a["runs"])


def test_other_exponential_optima_are_alternatives_never_chosen(fitted):
    name, ours, ref = fitted
    for subset, r in ref.items():
        if "claim_R_ref_vs_loss" not in r or r["claim_R_ref_vs_loss"]["exp_fit"] is None:
            continue
        ex = ours["splits"][subset]["across"]["R_ref_vs_loss"]["exp_fit"]
        assert "curve_fit" in ex["method"]
        (alt,) = ex["alternatives"]
        runs = [x for x in ours["splits"][subset]["runs"] if x["loss"] is not None]
        L = np.array([x["loss"] for x in runs])
        y = np.array([x["forms"]["linear_log"]["params"]["R_ref"]["estimate"] for x in runs])
        sse = float(((y - (alt["gamma"] + alt["alpha"] * np.exp(-alt["beta"] * L))) ** 2).sum())
        assert sse == pytest.approx(alt["sse"], rel=1e-6, abs=1e-14)
        assert alt["sse"] <= ex["sse"] * (1 + 1e-6) + 1e-15  # the global optimum is never worse
        if alt["sse"] < ex["sse"] * (1 - 1e-6) - 1e-15:
            assert "not chosen" in ex["note"]


def test_outside_the_reference_layout_the_opgen_defaults_hold(tmp_path):
    """--no-like-reference on the reference layout: binomial weights with counts, p-values from --min-n."""
    from click.testing import CliRunner
    from opgen.cli import cli

    root = F.write_reference(tmp_path / "ref", tokens=dict(FIRST[:5]), short=())
    res = CliRunner().invoke(cli, ["fit", "--reference", str(root), "--out", str(tmp_path / "o"), "--resamples",
                                   "20", "--no-plots", "--forms", "linear_log", "--assume-n", "512",
                                   "--no-like-reference"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert doc["like_reference"] is False and doc["weights"] == "binomial"
    assert doc["splits"]["b3b4"]["across"]["R_ref_vs_loss"]["spearman"]["p"] is None
