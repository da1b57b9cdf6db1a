"""Choosing between forms: information criteria, a backtest on the latest checkpoints, and how much the
parameters move when the fit window moves.

AIC = 2k − 2 log L and BIC = k ln(m) − 2 log L over the m fitted points, with the binomial likelihood
where counts exist (else the Gaussian one with its variance as one more parameter). The backtest fits
each form on the earliest (1 − holdout_frac) of a run's checkpoints and scores its predictions on the
rest: RMSE of the rates and, with counts, the mean binomial log loss per answer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from opgen.fit import models


def min_points(form: models.Form) -> int:
    """Points a form needs: one more than its parameters (three for the line, as the reference)."""
    return max(3, form.n_params + 1)


def point_fit(form: models.Form, design: models.Design, y: np.ndarray, n: np.ndarray | None) -> models.Fit:
    if form.name == "linear_log" and n is None:
        return models.ols_line(design, y)
    return models.fit(form, design, y[None, :], None if n is None else n[None, :], polish=True)


def criteria(fit: models.Fit, y: np.ndarray, n: np.ndarray | None) -> dict:
    m = y.shape[-1]
    k = fit.form.n_params
    if n is not None:
        ll = float(models.binomial_loglik(y * n, n, fit.mu[0]))
    else:
        sse = float(((y - fit.mu[0]) ** 2).sum())
        k += 1
        ll = -0.5 * m * (math.log(2 * math.pi * max(sse, 1e-300) / m) + 1)
    return {"loglik": ll, "k": k, "aic": 2 * k - 2 * ll, "bic": k * math.log(m) - 2 * ll}


def holdout_split(m: int, frac: float) -> int:
    """How many of m points are fitted when the last ``frac`` of them are held out (at least one)."""
    if frac <= 0:
        return m
    return m - max(1, math.ceil(frac * m))


def backtest(forms: list[models.Form], x: np.ndarray, ref: float, y: np.ndarray, n: np.ndarray | None,
             frac: float) -> dict:
    m_fit = holdout_split(len(x), frac)
    out: dict = {"holdout_frac": frac, "n_fit": m_fit, "n_heldout": len(x) - m_fit, "forms": {}, "best": None}
    if m_fit == len(x):
        return out
    scores: dict[str, float] = {}
    for form in forms:
        if m_fit < min_points(form):
            out["forms"][form.name] = {"skipped": f"{m_fit} points before the held-out ones; needs "
                                                  f"{min_points(form)}"}
            continue
        design = models.Design(x[:m_fit], ref)
        f = point_fit(form, design, y[:m_fit], None if n is None else n[:m_fit])
        pred = form.mu(models.Design(x, ref), f.phi, f.lin)[0][m_fit:]
        held = y[m_fit:]
        entry: dict[str, Any] = {"rmse": float(np.sqrt(np.mean((held - pred) ** 2))),
                 "max_abs_error": float(np.max(np.abs(held - pred))),
                 "predicted": [float(v) for v in pred], "observed": [float(v) for v in held],
                 "fit_params": {k: float(v[0]) for k, v in f.params().items()}}
        if n is not None:
            nn = n[m_fit:]
            entry["log_loss"] = float(-models.binomial_loglik(held * nn, nn, pred) / max(nn.sum(), 1))
        out["forms"][form.name] = entry
        scores[form.name] = entry["rmse"]
    if scores:
        out["best"] = min(sorted(scores), key=lambda k: scores[k])
    return out


def windows(m: int) -> list[tuple[str, int, int]]:
    """The fit windows of the sensitivity table: all points, the first one or two dropped, only the
    first three quarters or half."""
    out = [("all", 0, m), ("drop_first_1", 1, m), ("drop_first_2", 2, m),
           ("first_75pct", 0, math.ceil(0.75 * m)), ("first_50pct", 0, math.ceil(0.5 * m))]
    seen, uniq = set(), []
    for name, a, b in out:
        if (a, b) not in seen and b - a >= 3:
            seen.add((a, b))
            uniq.append((name, a, b))
    return uniq


def window_table(forms: list[models.Form], x: np.ndarray, ref: float, y: np.ndarray,
                 n: np.ndarray | None) -> list[dict]:
    rows = []
    for name, a, b in windows(len(x)):
        for form in forms:
            if b - a < min_points(form):
                continue
            f = point_fit(form, models.Design(x[a:b], ref), y[a:b], None if n is None else n[a:b])
            rows.append({"window": name, "first": a, "last": b - 1, "n_points": b - a, "form": form.name,
                         "params": {k: float(v[0]) for k, v in f.params().items()}})
    return rows
