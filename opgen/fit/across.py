"""Across runs: a per-run level (R_ref, or an asymptote A) against pretraining loss, and the per-run
slope B against log10 pretraining tokens.

Two intervals for each statistic, because there are two sources of doubt: ``ci_runs`` — which runs
happened to be trained (Fisher z; for Spearman with the Bonett–Wright standard error), which is what
a handful of runs mostly leaves open; ``ci_measurement`` — the per-run estimates' own noise, from the
same bootstrap replicates as the per-run fits. Below ``min_n`` runs a statistic is still reported,
with a warning and without a p-value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from opgen.fit import models, uncertainty


def _z_interval(r: float, se: float, level: float) -> list[float] | None:
    from statistics import NormalDist

    if not math.isfinite(r) or not math.isfinite(se):
        return None
    z = math.atanh(max(min(r, 1 - 1e-15), -1 + 1e-15))
    q = NormalDist().inv_cdf((1 + level) / 2)
    return [math.tanh(z - q * se), math.tanh(z + q * se)]


def _rowwise_pearson(x: np.ndarray, Y: np.ndarray) -> np.ndarray:
    xc = x - x.mean()
    Yc = Y - Y.mean(1, keepdims=True)
    with np.errstate(all="ignore"):
        return (Yc @ xc) / np.sqrt((Yc * Yc).sum(1) * (xc @ xc))


def correlation(kind: str, x: np.ndarray, y: np.ndarray, reps: np.ndarray | None, level: float,
                min_n: int, withhold_p: bool = True) -> dict:
    """Spearman or Pearson correlation of y on x, with both intervals and (n >= min_n, or always
    when not ``withhold_p``: the reference's way) a p-value beside n."""
    from scipy import stats

    n = len(x)
    out: dict = {"method": kind, "n": n, "estimate": None, "p": None, "ci_runs": None, "ci_measurement": None,
                 "warning": None}
    if n < 3:
        out["warning"] = f"{n} runs: too few for a correlation"
        return out
    if np.ptp(x) == 0 or np.ptp(y) <= 1e-12 * max(1.0, float(np.max(np.abs(y)))):
        out["warning"] = "constant values: no correlation is defined"
        return out
    if kind == "spearman":
        r, p = stats.spearmanr(x, y)
        se = math.sqrt((1 + r * r / 2) / (n - 3)) if n > 3 else math.inf
    else:
        r, p = stats.pearsonr(x, y)
        se = 1 / math.sqrt(n - 3) if n > 3 else math.inf
    out["estimate"] = float(r)
    if n > 3 and abs(r) < 1:
        out["ci_runs"] = _z_interval(float(r), se, level)
    elif n > 3:
        out["warning"] = "a perfect (rank) correlation: the Fisher interval is undefined; read n"
    if reps is not None:
        if kind == "spearman":
            rv = _rowwise_pearson(stats.rankdata(x), stats.rankdata(reps, axis=1))
        else:
            rv = _rowwise_pearson(x, reps)
        lo, hi, k = uncertainty.percentile(rv, level)
        out["ci_measurement"] = None if lo is None else [lo, hi]
    if n >= min_n:
        out["p"] = float(p)
    elif not withhold_p:
        out["p"] = float(p)
        few = f"only {n} runs (< --min-n {min_n}): the p-value is shown as the reference shows it; read it with n"
        out["warning"] = f"{out['warning']}; {few}" if out["warning"] else few
    else:
        few = f"only {n} runs (< --min-n {min_n}): read the estimate with its interval; no p-value is given"
        out["warning"] = f"{out['warning']}; {few}" if out["warning"] else few
    return out


def linear(x: np.ndarray, y: np.ndarray, reps: np.ndarray | None, level: float) -> dict:
    """The reference's np.polyfit line (slope, intercept, R²) with measurement intervals."""
    slope, intercept = np.polyfit(x, y, 1)
    pred = intercept + slope * x
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    out: dict[str, Any] = {"slope": {"estimate": float(slope)}, "intercept": {"estimate": float(intercept)}, "R2": r2}
    if reps is not None:
        xc = x - x.mean()
        sl = ((reps - reps.mean(1, keepdims=True)) @ xc) / float(xc @ xc)
        ic = reps.mean(1) - sl * x.mean()
        for name, vals in (("slope", sl), ("intercept", ic)):
            lo, hi, _ = uncertainty.percentile(vals, level)
            out[name].update({"ci_low": lo, "ci_high": hi, "method": "bootstrap"})
    return out


def exponential(L: np.ndarray, y: np.ndarray, reps: np.ndarray | None, level: float) -> dict | None:
    """gamma + alpha·exp(−beta·L) by least squares: beta over a dense grid with (gamma, alpha) in
    closed form, then refined — no starting point. beta is flagged when its profile runs to the edge
    of the range (the data cannot tell an exponential from a line or a step there)."""
    if len(L) < 4 or np.ptp(y) == 0:
        return None
    form = models.FORMS["exp_loss"]
    design = models.Design(np.asarray(L, dtype=float))
    point = models.fit(form, design, y[None, :], polish=True)
    pars = point.params()
    pred = point.mu[0]
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    out: dict = {"equation": form.equation, "R2": r2, "sse": float(((y - pred) ** 2).sum())}
    out["shape"], out["change"] = models.shape(L, pred)
    boot = models.fit(form, design, reps).params() if reps is not None else None
    prof = uncertainty.profile(point, y, level)["beta"]
    for name in ("alpha", "beta", "gamma"):
        entry: dict[str, Any] = {"estimate": float(pars[name][0])}
        if boot is not None:
            lo, hi, _ = uncertainty.percentile(boot[name], level)
            entry.update({"ci_low": lo, "ci_high": hi, "method": "bootstrap"})
        out[name] = entry
    bounded = not (prof["open_low"] or prof["open_high"])
    out["beta"].update({"profile_low": prof["low"], "profile_high": prof["high"], "bounded": bounded})
    if not bounded:
        out["beta"].update({"ci_low": prof["low"], "ci_high": prof["high"], "method": "profile"})
        out["warning"] = "beta is not bounded by the data (its profile reaches the edge of the searched range)"
    return out


REFERENCE_P0 = (100.0, 12.0, 0.03)  # the reference's curve_fit start point (alpha, beta, gamma)
REFERENCE_MAXFEV = 20000


def _exp_curve(L, alpha, beta, gamma):
    return gamma + alpha * np.exp(-beta * np.asarray(L))


def _curve_fit(L: np.ndarray, y: np.ndarray) -> tuple[np.ndarray | None, str | None]:
    """scipy's curve_fit from the reference's start point, exactly as the reference calls it."""
    import warnings

    from scipy.optimize import curve_fit

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            popt, _ = curve_fit(_exp_curve, L, y, p0=list(REFERENCE_P0), maxfev=REFERENCE_MAXFEV)
    except Exception as exc:  # the reference catches every failure the same way
        return None, f"{type(exc).__name__}: {exc}"
    return np.asarray(popt, dtype=float), None


EXPECTED_VS_LOSS = "decaying"  # a lower pretraining loss is expected to give a higher accuracy


def exp_warnings(fit: dict | None, what: str) -> list[str]:
    """What a reader must be told of a level's exponential fit against loss: a shape other than the
    expected one (accuracy falling as loss rises), in plain words, with its parameters."""
    if not fit or fit.get("shape") in (None, EXPECTED_VS_LOSS, "flat"):
        return []
    pars = ", ".join(f"{k} = {fit[k]['estimate']:.4g}" for k in ("alpha", "beta", "gamma")
                     if fit.get(k, {}).get("estimate") is not None)
    loose = "; beta is not bounded by the data" if fit.get("beta", {}).get("bounded") is False else ""
    return [f"the exponential fit is {fit['shape']} ({pars}{loose}): {what} rises with pretraining loss "
            f"by {fit['change']:+.3g} over the runs' loss range, against the expected direction (lower loss, "
            f"higher accuracy); read it as this subset's data, not as a scaling law"]


def exponential_reference(L: np.ndarray, y: np.ndarray, reps: np.ndarray | None, level: float) -> dict | None:
    """gamma + alpha·exp(−beta·L) as the reference fits it: ``curve_fit`` from p0 = (100, 12, 0.03),
    maxfev 20000 — a local optimum, the one the reference reports. The global least-squares optimum
    (``exponential``: a dense grid over beta, no start point) is reported beside it under
    ``alternatives``, never chosen in its place; bootstrap intervals refit every replicate from the
    same start point."""
    L = np.asarray(L, dtype=float)
    popt, err = _curve_fit(L, y)
    out: dict[str, Any] = {"equation": "f(L) = gamma + alpha * exp(-beta * L)",
                           "method": "curve_fit from p0 = [100, 12, 0.03], maxfev 20000 (the reference's)"}
    ss_tot = float(((y - y.mean()) ** 2).sum())
    if popt is None:
        out.update({"R2": None, "sse": None, "failed": err,
                    "alpha": {"estimate": None}, "beta": {"estimate": None}, "gamma": {"estimate": None}})
    else:
        pred = _exp_curve(L, *popt)
        ss_res = float(((y - pred) ** 2).sum())
        out.update({"R2": 1 - ss_res / ss_tot if ss_tot > 0 else None, "sse": ss_res})
        out["shape"], out["change"] = models.shape(L, pred)
        boot = None
        if reps is not None:
            fits = [_curve_fit(L, row)[0] for row in reps]
            boot = np.array([f if f is not None else (np.nan, np.nan, np.nan) for f in fits])
            out["n_resamples_failed"] = int(sum(f is None for f in fits))
        for i, name in enumerate(("alpha", "beta", "gamma")):
            entry: dict[str, Any] = {"estimate": float(popt[i])}
            if boot is not None:
                lo, hi, _ = uncertainty.percentile(boot[:, i], level)
                entry.update({"ci_low": lo, "ci_high": hi, "method": "bootstrap"})
            out[name] = entry
    alt = exponential(L, y, None, level) if len(L) >= 4 and np.ptp(y) > 0 else None
    out["alternatives"] = []
    if alt is not None:
        a = {"method": "global least squares (beta over a dense grid, no start point)",
             "alpha": alt["alpha"]["estimate"], "beta": alt["beta"]["estimate"], "gamma": alt["gamma"]["estimate"],
             "R2": alt["R2"], "sse": alt["sse"], "shape": alt["shape"], "beta_bounded": alt["beta"]["bounded"]}
        out["alternatives"].append(a)
        if out["sse"] is None or a["sse"] < out["sse"] * (1 - 1e-6) - 1e-15:
            out["note"] = (f"another optimum fits better (sse {a['sse']:.4g} against "
                           f"{'none' if out['sse'] is None else format(out['sse'], '.4g')}, beta {a['beta']:.4g}, "
                           f"{a['shape']}): reported under alternatives, not chosen")
    return out
