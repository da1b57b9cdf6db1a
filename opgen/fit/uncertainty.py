"""Uncertainty: bootstrap replicates of every curve, percentile intervals, and profile intervals that
say where a parameter is not bounded by the data.

Bootstrap methods (chosen by what the input holds):
  cluster   prompts are resampled with replacement in clusters of what they share (operator set,
            family, ...), the same draw for every run, checkpoint and split (a prompt is the same prompt
            at every checkpoint), and seeds are resampled within a run when it has two or more;
  binomial  counts without prompt identity: each count is redrawn from Binomial(n, observed rate),
            seeds resampled as above;
  residual  rates without counts (the reference layout): y* = fitted + sigma_hat * normal, per form.

Draws come from one numpy Generator seeded with --seed, in a fixed order (chunks of replicates;
clusters first, then the curves in sorted order), so a seed gives the same intervals on every run.
Cluster and seed resampling use only ``Generator.random`` (uniforms turned into indices).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from opgen.fit import models

CHUNK = 250  # replicates drawn at once (fixed: the draw order, hence the result, must not depend on it)


def _resample_counts(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """[rows, k] multiplicities of k items drawn k times with replacement, per row."""
    idx = np.floor(rng.random((rows, k)) * k).astype(np.int64)
    idx = np.minimum(idx, k - 1) + (np.arange(rows) * k)[:, None]
    return np.bincount(idx.ravel(), minlength=rows * k).reshape(rows, k).astype(float)


def count_replicates(curves: list, method: str, resamples: int, seed: int, n_clusters: int) -> dict:
    """curve key -> (K* [R, m], N* [R, m]) for count data. ``curves`` carry K, N [S, C, m] and the
    global cluster index of each of their C clusters (``cluster_idx``)."""
    rng = np.random.default_rng(seed)
    out: dict[Any, tuple[list, list]] = {c.key: ([], []) for c in curves}
    done = 0
    while done < resamples:
        r = min(CHUNK, resamples - done)
        wc = _resample_counts(rng, r, n_clusters) if method == "cluster" else None
        for c in curves:
            S = c.K.shape[0]
            if method == "cluster":
                assert wc is not None
                w = wc[:, c.cluster_idx]  # [r, C]
                ks = np.einsum("rc,scm->rsm", w, c.K)
                ns = np.einsum("rc,scm->rsm", w, c.N)
            else:
                k = c.K.sum(1)
                n = c.N.sum(1)  # [S, m]
                p = np.divide(k, n, out=np.zeros_like(k), where=n > 0)
                ks = rng.binomial(n.astype(np.int64)[None].repeat(r, 0), p[None].repeat(r, 0)).astype(float)
                ns = np.broadcast_to(n, ks.shape).astype(float)
            if S >= 2:
                ws = _resample_counts(rng, r, S)  # [r, S]
                ks = ks * ws[:, :, None]
                ns = ns * ws[:, :, None]
            out[c.key][0].append(ks.sum(1))
            out[c.key][1].append(ns.sum(1))
        done += r
    return {k: (np.concatenate(a), np.concatenate(b)) for k, (a, b) in out.items()}


def residual_replicates(fit: models.Fit, y: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray | None:
    """[R, m] rates drawn around a point fit with its residual spread (None without degrees of freedom)."""
    m = y.shape[-1]
    dof = m - fit.form.n_params
    if dof <= 0:
        return None
    sigma = math.sqrt(float(((y - fit.mu[0]) ** 2).sum()) / dof)
    return fit.mu[0][None, :] + sigma * rng.standard_normal((resamples, m))


def percentile(values: np.ndarray, level: float) -> tuple[float | None, float | None, int]:
    v = values[np.isfinite(values)]
    if v.size < 2:
        return None, None, int(v.size)
    lo, hi = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi), int(v.size)


PROFILE_POINTS = 41


def chi2_quantile(level: float) -> float:
    """The level quantile of chi-square with one degree of freedom (the square of a normal quantile)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf((1 + level) / 2) ** 2


def _crossing(grid: np.ndarray, prof: np.ndarray, i0: int, cut: float, step: int) -> tuple[float, bool]:
    """Where the profile, walked from the estimate at grid[i0] in direction ``step``, first rises above
    ``cut`` (linear interpolation between the last point inside and the first outside); the range's
    end and True when it never does."""
    i = i0
    while 0 <= i + step < len(grid):
        j = i + step
        if prof[j] > cut:
            a, b = prof[i], prof[j]
            t = (cut - a) / (b - a) if b > a else 0.0
            return float(grid[i] + t * (grid[j] - grid[i])), False
        i = j
    return float(grid[i]), True


def profile(point: models.Fit, y: np.ndarray, level: float) -> dict[str, dict]:
    """Profile intervals of every parameter a form profiles: the weighted chi-square minimised over
    the other parameters with this one held at each of PROFILE_POINTS values across its whole range,
    cut at min + chi2_1(level) * dispersion. A side that never crosses the cut before the range ends is
    open: the data do not bound the parameter there."""
    form, design = point.form, point.design
    m = y.shape[-1]
    W = point.weights[0]
    chi_min = float(point.chi2[0])
    dof = m - form.n_params
    dispersion = max(1.0, chi_min / dof) if dof > 0 else 1.0
    cut = chi_min + chi2_quantile(level) * dispersion
    nl_range = form.nl_range(design)
    est_nl, est_lin = point.phi[0], point.lin[0]
    out = {}
    for name, (kind, idx, to_public) in form.profiled.items():
        lo_b, hi_b = (form.lin_bounds[idx] if kind == "lin" else tuple(nl_range[idx]))
        est = float(est_lin[idx] if kind == "lin" else est_nl[idx])
        grid = np.unique(np.concatenate([np.linspace(lo_b, hi_b, PROFILE_POINTS), [est]]))
        R = len(grid)
        nl_lo = np.repeat(nl_range[None, :, 0], R, 0)
        nl_hi = np.repeat(nl_range[None, :, 1], R, 0)
        lin_lo = np.array([[b[0] for b in form.lin_bounds]] * R, dtype=float)
        lin_hi = np.array([[b[1] for b in form.lin_bounds]] * R, dtype=float)
        if kind == "lin":
            lin_lo[:, idx] = lin_hi[:, idx] = grid
        else:
            nl_lo[:, idx] = nl_hi[:, idx] = grid
        prof = models.fit(form, design, np.repeat(y[None], R, 0), weights=np.repeat(W[None], R, 0),
                          nl_lo=nl_lo, nl_hi=nl_hi, lin_lo=lin_lo, lin_hi=lin_hi).chi2
        i0 = int(np.searchsorted(grid, est))

        low, open_low = _crossing(grid, prof, i0, cut, -1)
        high, open_high = _crossing(grid, prof, i0, cut, +1)
        pub = [float(to_public(design, np.array(v))) for v in (low, high)]
        out[name] = {"low": min(pub), "high": max(pub),
                     "open_low": open_low if pub[0] <= pub[1] else open_high,
                     "open_high": open_high if pub[0] <= pub[1] else open_low,
                     "cut": cut, "dispersion": dispersion}
    return out
