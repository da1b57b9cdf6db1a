"""The whole fit: observations -> per-run curves -> fits with intervals -> across-run statistics ->
model choice. Returns one plain dict (fit.json's content) plus the curves the plots need."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opgen._version import __version__
from opgen.fit import FitInputError, across, models, select, uncertainty
from opgen.fit import compute as CD
from opgen.fit.inputs import RUN_FIELDS, Observations

SCHEMA_ID = "opgen.fit/1"
MIN_CLUSTERS = 20  # fewer clusters than this: the cluster bootstrap carries a warning


@dataclass(frozen=True)
class FitConfig:
    compute: str = "rollout"
    c_ref: float | None = None
    forms: tuple[str, ...] = models.CURVE_FORMS
    weights: str = "binomial"
    resamples: int = 1000
    seed: int = 0
    level: float = 0.95
    holdout_frac: float = 0.25
    min_step: int | None = None
    max_step: int | None = None
    min_n: int = 6
    assume_n: int | None = None
    overrides: Mapping = field(default_factory=dict)  # per-run fields for runs that lack them
    # every default as the reference analysis has it (docs/fit.md "Moving from the reference script"):
    # claims over runs with a loss only, and only from 4 of them; p-values beside n at any n; the
    # exponential from curve_fit's start point (the global optimum beside it as an alternative)
    like_reference: bool = False


@dataclass
class Curve:
    split: str
    run: str
    seeds: list[int]
    steps: list[int] | None
    compute: np.ndarray
    y: np.ndarray  # pooled rate per point
    n: np.ndarray | None  # answers per point (None: rates only)
    K: np.ndarray | None = None  # [S, C, m]
    N: np.ndarray | None = None
    cluster_idx: np.ndarray | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.split, self.run)

    @property
    def x(self) -> np.ndarray:
        return np.log10(self.compute)


def _run_info(obs: Observations, run: str, cfg: FitConfig) -> dict:
    info = dict(obs.runs.get(run) or {})
    for f in RUN_FIELDS:
        if info.get(f) is None and cfg.overrides.get(f) is not None:
            info[f] = cfg.overrides[f]
    return info


def _mean_rates(points: dict, keys: list) -> np.ndarray:
    return np.array([np.mean([points[p][s][None][0] for s in points[p]]) for p in keys], dtype=float)


def build_curves(obs: Observations, cfg: FitConfig, warnings: list[str]) -> tuple[list[Curve], int, dict]:
    cdef = CD.get(cfg.compute)
    if cdef.name == "given" and any(k[4] is None for k in obs.cells):
        raise FitInputError("--compute given needs a compute value on every row of the tidy table")
    clusters = sorted({k[5] for k in obs.cells if k[5] is not None})
    cindex = {c: i for i, c in enumerate(clusters)}
    groups: dict[tuple, dict] = {}
    for key, (k, n) in obs.cells.items():
        split, run, seed, step, comp, cl = key
        if cdef.name != "given" and step is None:
            raise FitInputError(f"run {run!r}: a row has no step; compute {cdef.name!r} is per step "
                                f"(use --compute given with a compute column)")
        if step is not None and ((cfg.min_step is not None and step < cfg.min_step)
                                 or (cfg.max_step is not None and step > cfg.max_step)):
            continue
        groups.setdefault((split, run), {}).setdefault((step, comp), {}).setdefault(seed, {})[cl] = (k, n)
    per_run: dict[str, dict[str, Any]] = {}
    curves = []
    for (split, run), points in sorted(groups.items()):
        info = _run_info(obs, run, cfg)
        if run not in per_run:
            per_step = cdef.per_step(run, info)
            per_run[run] = {"per_step": per_step, **{f: info.get(f) for f in RUN_FIELDS},
                            "from_metrics_json": sorted(info.get("token_means_from") or [])}
        per_step = per_run[run]["per_step"]
        keys = sorted(points, key=lambda sc: (sc[1] if cdef.name == "given" else sc[0]))
        comp = [(c if cdef.name == "given" else s * per_step) for s, c in keys]
        keep = [i for i, c in enumerate(comp) if c > 0]
        if len(keep) < len(keys):
            warnings.append(f"{split}/{run}: {len(keys) - len(keep)} point(s) with zero compute (step 0) left out")
        keys = [keys[i] for i in keep]
        comp = np.array([comp[i] for i in keep], dtype=float)
        seeds = sorted({s for p in keys for s in points[p]})
        steps = None if any(s is None for s, _ in keys) else [s for s, _ in keys]
        if obs.counts or cfg.assume_n:
            cl_keys = sorted({c for p in keys for s in points[p] for c in points[p][s]}, key=str)
            local = {c: i for i, c in enumerate(cl_keys)}
            K = np.zeros((len(seeds), len(cl_keys), len(keys)))
            N = np.zeros_like(K)
            for t, p in enumerate(keys):
                for si, s in enumerate(seeds):
                    for c, (k, n) in points[p].get(s, {}).items():
                        if n is None:  # a rate read as assume_n answers
                            k, n = k * cfg.assume_n, cfg.assume_n
                        K[si, local[c], t] += k
                        N[si, local[c], t] += n
            ntot = N.sum((0, 1))
            if obs.counts:
                y = np.divide(K.sum((0, 1)), ntot, out=np.zeros(len(keys)), where=ntot > 0)
            else:  # rates read as --assume-n answers: the curve is still the rates themselves
                y = _mean_rates(points, keys)
            cidx = np.array([cindex[c] if c is not None else 0 for c in cl_keys], dtype=np.int64)
            curves.append(Curve(split, run, seeds, steps, comp, y, ntot, K, N, cidx))
        else:
            y = _mean_rates(points, keys)
            curves.append(Curve(split, run, seeds, steps, comp, y, None))
    return curves, max(len(clusters), 1), per_run


def _param_entry(est: float, boot: np.ndarray | None, prof: dict | None, level: float) -> dict:
    e: dict = {"estimate": est, "ci_low": None, "ci_high": None, "method": None, "bounded": True,
               "n_resamples": 0}
    if boot is not None:
        lo, hi, k = uncertainty.percentile(boot, level)
        e.update({"ci_low": lo, "ci_high": hi, "method": "bootstrap", "n_resamples": k})
    if prof is not None:
        e.update({"profile_low": prof["low"], "profile_high": prof["high"], "open_low": prof["open_low"],
                  "open_high": prof["open_high"]})
        if prof["open_low"] or prof["open_high"]:
            # not bounded by the data: the profile interval, running to the edge of the range
            e.update({"bounded": False, "method": "profile", "ci_low": prof["low"], "ci_high": prof["high"]})
    return e


def _fit_form(form: models.Form, design: models.Design, curve: Curve, binomial: bool, reps, level: float,
              rng: np.random.Generator, resamples: int) -> tuple[dict, dict | None]:
    y, n = curve.y, (curve.n if binomial else None)
    point = select.point_fit(form, design, y, n)
    est = point.params()
    boot = None
    if reps is not None:
        Ys, Ns = reps
        boot = models.fit(form, design, Ys, Ns if binomial else None).params()
    elif curve.n is None and resamples:
        Ys = uncertainty.residual_replicates(point, y, resamples, rng)
        boot = models.fit(form, design, Ys).params() if Ys is not None else None
    prof = uncertainty.profile(point, y, level) if form.nl_names else {}
    m = len(y)
    out: dict[str, Any] = {
        "equation": form.equation,
        "params": {k: _param_entry(float(v[0]), None if boot is None else boot[k], prof.get(k), level)
                   for k, v in est.items()},
        "chi2": float(point.chi2[0]), "dof": m - form.n_params,
    }
    out["shape"], out["change"] = models.shape(design.x, point.mu[0])
    out["dispersion"] = out["chi2"] / out["dof"] if out["dof"] > 0 and binomial else None
    out.update(select.criteria(point, y, n))
    return out, boot


def _against_compute(entry: dict, curve: Curve, warnings: list[str]) -> None:
    """One warning per run whose fitted curves fall as compute grows (accuracy is expected not to)."""
    falling = []
    for name, f in entry["forms"].items():
        if f.get("shape") != "decaying":
            continue
        ps = ", ".join(f"{k} = {_shown(p)}" for k, p in f["params"].items())
        falling.append(f"{name} ({ps}; fitted accuracy {f['change']:+.3g} over the run's compute range)")
    if falling:
        warnings.append(f"{curve.split}/{curve.run}: decaying fit: {'; '.join(falling)}: accuracy falls as RL "
                        f"compute grows, against the expected direction (it should not fall); read the "
                        f"checkpoints' order and steps before the parameters")


def _shown(p: dict) -> str:
    """A parameter as the warnings print it: estimate [interval]."""
    if p["estimate"] is None or not math.isfinite(p["estimate"]):
        return "n/a"
    ci = f" [{p['ci_low']:.3g}, {p['ci_high']:.3g}]" if p.get("ci_low") is not None and p.get("ci_high") is not None \
        else ""
    return f"{p['estimate']:.4g}{ci}"


def _rep_arrays(curve: Curve, reps: dict | None):
    if reps is None:
        return None
    K, N = reps[curve.key]
    Y = np.divide(K, N, out=np.zeros_like(K), where=N > 0)
    return Y, N


def run_fit(obs: Observations, cfg: FitConfig, progress=None) -> tuple[dict, list[Curve]]:
    """The whole fit; ``progress(message)`` (optional) is told each stage and each run as it is fitted."""
    say = progress or (lambda _m: None)
    if cfg.weights not in ("binomial", "ols"):
        raise FitInputError(f"unknown weights {cfg.weights!r} (binomial, ols)")
    forms = [models.get_form(f) for f in cfg.forms]
    if not forms:
        raise FitInputError("no forms to fit")
    warnings: list[str] = list(obs.notes)
    curves, n_clusters, per_run = build_curves(obs, cfg, warnings)
    cdef = CD.get(cfg.compute)
    c_ref = cfg.c_ref if cfg.c_ref is not None else cdef.default_c_ref
    ref = math.log10(c_ref)
    counts = obs.counts or bool(cfg.assume_n)
    binomial = counts and cfg.weights == "binomial"
    if counts:
        method = "cluster" if obs.cluster_by is not None else "binomial"
    else:
        method = "residual"
    usable = []
    for c in curves:
        if len(c.y) < 3:
            warnings.append(f"{c.split}/{c.run}: {len(c.y)} points; at least 3 are needed (run skipped)")
        else:
            usable.append(c)
    if not usable:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise FitInputError(f"no run has 3 or more checkpoints to fit{why}")
    if method == "cluster" and cfg.resamples and n_clusters < MIN_CLUSTERS:
        warnings.append(f"only {n_clusters} clusters ({obs.cluster_by}): bootstrap intervals from so few are coarse "
                        f"and tend to be too narrow; a finer --cluster-by (e.g. prompt) treats prompts as independent")
    say(f"{len(usable)} run curve(s) from {len(obs.cells)} cell(s); "
        f"{cfg.resamples} bootstrap resample(s) ({method})")
    reps = (uncertainty.count_replicates(usable, method, cfg.resamples, cfg.seed, n_clusters)
            if counts and cfg.resamples else None)
    rng = np.random.default_rng([cfg.seed, 1])  # residual draws: a stream of their own
    splits: dict[str, dict] = {}
    for i, c in enumerate(usable, 1):
        say(f"fitting {c.split}/{c.run} ({i}/{len(usable)})")
        rep = _rep_arrays(c, reps)
        design = models.Design(c.x, ref)
        info = per_run[c.run]
        entry: dict = {
            "run": c.run, "seeds": c.seeds, "n_points": len(c.y), "steps": c.steps,
            "compute": [float(v) for v in c.compute], "acc": [float(v) for v in c.y],
            "n": None if c.n is None else [int(round(v)) for v in c.n],
            "tokens": info.get("tokens"), "loss": info.get("loss"),
            "log10_tokens": math.log10(info["tokens"]) if info.get("tokens") else None,
            "c_ref_decades_beyond_data": ref - float(c.x.max()), "forms": {},
        }
        boots = {}
        for form in forms:
            if len(c.y) < select.min_points(form):
                need = select.min_points(form)
                entry["forms"][form.name] = {"skipped": f"{len(c.y)} points; {form.name} needs {need}"}
                continue
            entry["forms"][form.name], boots[form.name] = _fit_form(form, design, c, binomial, rep, cfg.level,
                                                                     rng, cfg.resamples)
        if c.steps is not None and cdef.name != "step":
            lin = models.FORMS["linear_log"]
            sdesign = models.Design(np.log10(np.array(c.steps, dtype=float)), 0.0)
            entry["step_only"], _ = _fit_form(lin, sdesign, c, binomial, rep, cfg.level, rng, cfg.resamples)
        n_arr = c.n if binomial else None
        entry["backtest"] = select.backtest(forms, c.x, ref, c.y, n_arr, cfg.holdout_frac)
        _against_compute(entry, c, warnings)
        fitted = {k: v for k, v in entry["forms"].items() if "aic" in v}
        entry["best"] = {"aic": min(sorted(fitted), key=lambda k: fitted[k]["aic"]) if fitted else None,
                         "bic": min(sorted(fitted), key=lambda k: fitted[k]["bic"]) if fitted else None,
                         "backtest": entry["backtest"]["best"]}
        sp = splits.setdefault(c.split, {"runs": [], "windows": []})
        sp["runs"].append(entry)
        for row in select.window_table(forms, c.x, ref, c.y, n_arr):
            sp["windows"].append({"run": c.run, **row})
        # per-run replicate values the across-run statistics need (the same draws as the intervals)
        entry["_reps"] = {"forms": boots, "acc_last": None if rep is None else rep[0][:, -1]}
    for split, sp in splits.items():
        say(f"across runs: {split}")
        sp["across"] = _across(sp["runs"], split, forms, cfg, warnings)
        for r in sp["runs"]:
            r.pop("_reps", None)
    result = {
        "schema": SCHEMA_ID, "opgen_version": __version__, "source": obs.source,
        "inputs": [{"path": p, "sha256": h} for p, h in sorted(obs.files.items())],
        "compute": {"definition": cdef.name, "formula": cdef.formula, "c_ref": c_ref, "log10_c_ref": ref,
                    "per_run": per_run},
        "window": {"min_step": cfg.min_step, "max_step": cfg.max_step},
        "weights": "binomial" if binomial else "ols",
        "seeds": {run: sorted({s for c in usable if c.run == run for s in c.seeds}) for run in sorted(per_run)},
        "uncertainty": {"method": method if cfg.resamples else None, "cluster_by": obs.cluster_by,
                        "n_clusters": n_clusters if method == "cluster" else None,
                        "resamples": cfg.resamples, "seed": cfg.seed, "level": cfg.level,
                        "profile": "chi-square profile, cut at min + chi2_1(level) x dispersion"},
        "forms": {f.name: f.equation for f in forms},
        "holdout_frac": cfg.holdout_frac, "min_n": cfg.min_n, "assume_n": cfg.assume_n,
        "like_reference": cfg.like_reference,
        "splits": splits, "warnings": warnings,
    }
    return result, usable


def _stack(runs: list[dict], get) -> np.ndarray | None:
    cols = [get(r["_reps"]) for r in runs]
    if any(c is None for c in cols):
        return None
    return np.stack(cols, axis=1)


def _boot(fname: str, pname: str):
    def get(reps: dict):
        b = reps["forms"].get(fname)
        return None if b is None else b[pname]
    return get


REFERENCE_MIN_RUNS = 4  # the reference makes its across-run claims from 4 runs with a loss


def _across(runs: list[dict], split: str, forms, cfg: FitConfig, warnings: list[str]) -> dict:
    """Levels against loss, slopes against log tokens, over this split's runs."""
    out: dict = {}
    names = {f.name for f in forms}
    ref = cfg.like_reference
    if ref:
        no_loss = [r["run"] for r in runs if r["loss"] is None]
        if no_loss:
            warnings.append(f"{split}: {len(no_loss)} run(s) without a pretraining loss ({', '.join(no_loss)}) "
                            f"enter no across-run claim, as in the reference")
        n_loss = len(runs) - len(no_loss)
        if n_loss < REFERENCE_MIN_RUNS:
            warnings.append(f"{split}: {n_loss} run(s) with a loss; the reference makes no across-run claim "
                            f"below {REFERENCE_MIN_RUNS}, and neither does --like-reference")
            return out
        runs = [r for r in runs if r["loss"] is not None]

    def corr(kind, x, y, rep):
        return across.correlation(kind, x, y, rep, cfg.level, cfg.min_n, withhold_p=not ref)
    # levels: R_ref of the line, A of the saturating forms (replicates refitted per run: the same
    # bootstrap draws as the per-run intervals)
    targets = [("R_ref", "linear_log", "R_ref"), ("A_sigmoid", "sigmoid", "A"), ("A_power", "power", "A")]
    with_loss = [r for r in runs if r["loss"] is not None]
    for label, fname, pname in targets:
        if fname not in names:
            continue
        rs = [r for r in with_loss if "params" in r["forms"].get(fname, {})]
        if not rs:
            continue
        L = np.array([r["loss"] for r in rs], dtype=float)
        y = np.array([r["forms"][fname]["params"][pname]["estimate"] for r in rs])
        rep = _stack(rs, _boot(fname, pname))
        entry: dict[str, Any] = {"x": "loss", "y": f"{fname}.{pname}", "runs": [r["run"] for r in rs],
                 "spearman": corr("spearman", L, y, rep),
                 "exp_fit": (across.exponential_reference(L, y, rep, cfg.level) if ref and label == "R_ref"
                             else across.exponential(L, y, rep, cfg.level))}
        if entry["spearman"]["warning"]:
            warnings.append(f"{split}: {label} vs loss: {entry['spearman']['warning']}")
        warnings.extend(f"{split}: {label} vs loss: {w}" for w in across.exp_warnings(entry["exp_fit"],
                                                                                      f"{fname}.{pname}"))
        out[f"{label}_vs_loss"] = entry
    if with_loss:
        L = np.array([r["loss"] for r in with_loss], dtype=float)
        y = np.array([r["acc"][-1] for r in with_loss])
        rep = _stack(with_loss, lambda reps: reps["acc_last"])
        out["acc_last_vs_loss"] = {
            "x": "loss", "y": "accuracy at the last measured checkpoint (no extrapolation)",
            "runs": [r["run"] for r in with_loss],
            "spearman": corr("spearman", L, y, rep),
            "pearson": corr("pearson", L, y, rep)}
    if "linear_log" in names:
        rs = [r for r in runs if r["log10_tokens"] is not None and "params" in r["forms"].get("linear_log", {})]
        if rs:
            T = np.array([r["log10_tokens"] for r in rs])
            B = np.array([r["forms"]["linear_log"]["params"]["B"]["estimate"] for r in rs])
            rep = _stack(rs, _boot("linear_log", "B"))
            entry = {"x": "log10_tokens", "y": "linear_log.B", "runs": [r["run"] for r in rs],
                     "pearson": corr("pearson", T, B, rep),
                     "spearman": corr("spearman", T, B, rep),
                     "linear_fit": across.linear(T, B, rep, cfg.level) if len(rs) >= 3 else None}
            if entry["pearson"]["warning"]:
                warnings.append(f"{split}: B vs log10 tokens: {entry['pearson']['warning']}")
            out["B_vs_log10_tokens"] = entry
    return out
