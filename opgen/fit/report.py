"""fit.json (schemas/fit.schema.json), fit_runs.csv, fit_windows.csv and the plots.

fit.json is removed first and written last, atomically: its presence means the fit is complete.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from opgen.files import atomic_write_bytes as _write_atomic
from opgen.files import write_json_atomic
from opgen.fit import models

SIG_DIGITS = 12  # printed precision: far below any interval, and stable across BLAS builds' last bits


def clean(obj):
    """JSON-safe and stable: floats to 12 significant digits, non-finite to null, numpy to Python."""
    if isinstance(obj, Mapping):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return float(f"{v:.{SIG_DIGITS}g}") if math.isfinite(v) else None
    return obj


def runs_csv(result: Mapping) -> str:
    cols = ["split", "run", "form", "param", "estimate", "ci_low", "ci_high", "method", "bounded",
            "n_points", "loss", "tokens", "aic", "bic", "backtest_rmse"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for split, sp in sorted(result["splits"].items()):
        for r in sp["runs"]:
            fits = dict(r["forms"])
            if "step_only" in r:
                fits["linear_log_step_only"] = r["step_only"]
            for form, f in fits.items():
                if "params" not in f:
                    continue
                bt = r["backtest"]["forms"].get(form, {})
                for param, p in f["params"].items():
                    w.writerow({"split": split, "run": r["run"], "form": form, "param": param,
                                "estimate": _blank(p["estimate"]), "ci_low": _blank(p["ci_low"]),
                                "ci_high": _blank(p["ci_high"]), "method": _blank(p["method"]),
                                "bounded": p["bounded"], "n_points": r["n_points"], "loss": _blank(r["loss"]),
                                "tokens": _blank(r["tokens"]), "aic": f["aic"], "bic": f["bic"],
                                "backtest_rmse": _blank(bt.get("rmse"))})
    return buf.getvalue()


def windows_csv(result: Mapping) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["split", "run", "window", "first", "last", "n_points", "form", "param", "estimate"])
    for split, sp in sorted(result["splits"].items()):
        for row in sp["windows"]:
            for param, v in row["params"].items():
                w.writerow([split, row["run"], row["window"], row["first"], row["last"], row["n_points"],
                            row["form"], param, v])
    return buf.getvalue()


def validate(result: Mapping) -> None:
    """fit.json against schemas/fit.schema.json (a failure here is a bug in opgen, not in the input)."""
    import jsonschema

    from opgen.resources import schema_path

    schema = json.loads(schema_path("fit.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(result, schema)


def _blank(v):
    return "" if v is None else v


PLOTS_EXTRA = "plots"  # the pyproject extra that installs matplotlib


def _commit(final: Path, result: Mapping, outputs: Sequence[Path]) -> None:
    doc = dict(result, outputs=sorted(p.name for p in outputs))
    validate(doc)
    write_json_atomic(final, doc)


def write(out: Path, result: Mapping, plots: bool = True) -> list[Path]:
    """The CSVs, then fit.json (complete: atomically, before any plot is tried), then the plots, then
    fit.json again with the plots listed. A plot that cannot be drawn (no matplotlib, a curve with a
    parameter that is not a finite number, any plotting error) costs one line in ``warnings``, never
    the results. Returns the paths written; ``result["warnings"]`` gains the plot notes."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    final = out / "fit.json"
    final.unlink(missing_ok=True)
    cleaned = clean(result)
    written = [out / "fit_runs.csv", out / "fit_windows.csv"]
    _write_atomic(written[0], runs_csv(cleaned).encode("utf-8"))
    _write_atomic(written[1], windows_csv(cleaned).encode("utf-8"))
    _commit(final, cleaned, written)
    if plots:
        notes: list[str] = []
        pngs = plot_all(cleaned, out, notes)
        if pngs or notes:
            warnings = list(cleaned["warnings"]) + notes
            if isinstance(result, dict):
                result["warnings"] = warnings
            cleaned = dict(cleaned, warnings=warnings)
            written.extend(pngs)
            _commit(final, cleaned, written)
    return [final, *written]


# ------------------------------------------------------------------------------------------- plots


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def missing_params(params: Mapping | None) -> list[str]:
    """Parameters of a fitted curve that are not finite numbers (fit.json writes them as null)."""
    if not params:
        return []
    return sorted(k for k, v in params.items() if not (isinstance(v, (int, float)) and math.isfinite(v)))


def plot_all(result: Mapping, out: Path, notes: list[str] | None = None) -> list[Path]:
    """Every plot that can be drawn; what cannot is one line each in ``notes``."""
    notes = [] if notes is None else notes
    try:
        import matplotlib
    except ImportError:
        notes.append(f"plots skipped: matplotlib is not installed (pip install 'opgen[{PLOTS_EXTRA}]'); "
                     f"fit.json and the CSVs are complete")
        return []
    matplotlib.use("Agg")
    jobs = []
    for split, sp in sorted(result["splits"].items()):
        jobs.append((out / f"fit_curves_{_safe(split)}.png",
                     lambda p, split=split, sp=sp: _plot_curves(result, split, sp, p, notes)))
        across = sp.get("across", {})
        if any(k.endswith("_vs_loss") and "exp_fit" in v for k, v in across.items()):
            jobs.append((out / f"fit_levels_vs_loss_{_safe(split)}.png",
                         lambda p, split=split, sp=sp: _plot_levels(split, sp, p)))
        if "B_vs_log10_tokens" in across:
            jobs.append((out / f"fit_slope_vs_tokens_{_safe(split)}.png",
                         lambda p, split=split, sp=sp: _plot_slopes(split, sp, p)))
    paths = []
    for path, draw in jobs:
        try:
            paths.append(draw(path))
        except Exception as exc:  # a plot is a view of fit.json; it never takes the results down
            import matplotlib.pyplot as plt

            plt.close("all")
            notes.append(f"plot {path.name} not drawn: {type(exc).__name__}: {exc}")
    return paths


def _plot_curves(result: Mapping, split: str, sp: Mapping, path: Path, notes: list[str]) -> Path:
    import matplotlib.pyplot as plt

    from opgen.sweep import save_png as _save

    forms = list(result["forms"])
    ref = result["compute"]["log10_c_ref"]
    fig, axes = plt.subplots(1, len(forms), figsize=(4.6 * len(forms), 4.2), sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, form in zip(axes[0], forms):
        full_only = False
        for i, r in enumerate(sp["runs"]):
            col = colors[i % len(colors)]
            x = np.log10(np.array(r["compute"]))
            y = np.array(r["acc"])
            bt = r["backtest"]
            m_fit = bt["n_fit"]
            f = bt["forms"].get(form, {})
            params = f.get("fit_params")
            if params is None:  # no backtest (holdout 0, or too few points): the full fit, all solid
                full = r["forms"].get(form, {}).get("params")
                params = {k: v["estimate"] for k, v in full.items()} if full else None
                m_fit = len(x)
                full_only = full_only or bt["n_heldout"] > 0
            if r["n"] is not None:
                from opgen.score.metrics import wilson

                ci = np.array([wilson(int(round(a * n)), n) for a, n in zip(y, r["n"])])
                ax.errorbar(x[:m_fit], y[:m_fit], yerr=[y[:m_fit] - ci[:m_fit, 0], ci[:m_fit, 1] - y[:m_fit]],
                            fmt="o", ms=3.5, color=col, lw=0.8, label=r["run"])
                if m_fit < len(x):
                    ax.errorbar(x[m_fit:], y[m_fit:], yerr=[y[m_fit:] - ci[m_fit:, 0], ci[m_fit:, 1] - y[m_fit:]],
                                fmt="o", ms=5, mfc="none", color=col, lw=0.8)
            else:
                ax.plot(x[:m_fit], y[:m_fit], "o", ms=3.5, color=col, label=r["run"])
                ax.plot(x[m_fit:], y[m_fit:], "o", ms=5, mfc="none", color=col)
            bad = missing_params(params)
            if bad:
                notes.append(f"{path.name}: {split}/{r['run']} {form} curve not drawn: "
                             f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a finite number")
                params = None
            if params is not None:
                xs = np.linspace(x[0], x[m_fit - 1], 80)
                ax.plot(xs, models.predict(form, params, xs, ref), "-", color=col, lw=1.4)
                if m_fit < len(x):
                    xe = np.linspace(x[m_fit - 1], x[-1], 40)
                    ax.plot(xe, models.predict(form, params, xe, ref), "--", color=col, lw=1.2)
        ax.set_title(form + (" (fit on all points: too few for the backtest)" if full_only else ""), fontsize=10)
        ax.set_xlabel(f"log10 compute ({result['compute']['definition']})")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.25)
    axes[0][0].set_ylabel("accuracy (95% Wilson)" if sp["runs"] and sp["runs"][0]["n"] else "accuracy")
    axes[0][0].legend(fontsize=7, loc="upper left")
    frac = result["holdout_frac"]
    fig.suptitle(f"{split}: fit on the first {1 - frac:.0%} of checkpoints (solid), extrapolated (dashed), "
                 f"held-out points hollow" if frac > 0 else f"{split}: fits", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _errbar(p: Mapping) -> tuple[float, float]:
    lo, hi = p.get("ci_low"), p.get("ci_high")
    e = p["estimate"]
    return (e - lo if lo is not None else 0.0, hi - e if hi is not None else 0.0)


def _with_ci(stat: Mapping) -> str:
    """A correlation's estimate and its interval over runs: ``+0.83 [+0.41, +0.97]``, ``n/a``."""
    est = "n/a" if stat["estimate"] is None else f"{stat['estimate']:+.2f}"
    ci = stat.get("ci_runs")
    return est + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.25)


def _plot_levels(split: str, sp: Mapping, path: Path) -> Path:
    import matplotlib.pyplot as plt

    from opgen.sweep import save_png as _save

    across = sp["across"]
    keys = [k for k in across if k.endswith("_vs_loss") and "exp_fit" in across[k]]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 4.0), squeeze=False)
    runs = {r["run"]: r for r in sp["runs"]}
    for ax, key in zip(axes[0], keys):
        a = across[key]
        fname, pname = a["y"].split(".")
        L = np.array([runs[r]["loss"] for r in a["runs"]])
        ps = [runs[r]["forms"][fname]["params"][pname] for r in a["runs"]]
        y = np.array([p["estimate"] for p in ps])
        err = np.array([_errbar(p) for p in ps]).T
        open_ = [not p["bounded"] for p in ps]
        ax.errorbar(L, y, yerr=err, fmt="o", color="C0", lw=0.8, ms=4)
        if any(open_):
            ax.plot(L[open_], y[open_], "x", color="C3", ms=8, label="not bounded by the data")
            ax.legend(fontsize=7)
        ex = a["exp_fit"]
        if ex is not None and all(ex[k]["estimate"] is not None for k in ("alpha", "beta", "gamma")):
            ls = np.linspace(L.min(), L.max(), 80)
            with np.errstate(all="ignore"):
                curve = ex["gamma"]["estimate"] + ex["alpha"]["estimate"] * np.exp(-ex["beta"]["estimate"] * ls)
            ax.plot(ls, curve, "-", color="C1", lw=1.2)
        _label(ax, f"{a['y']} vs loss: Spearman {_with_ci(a['spearman'])}", "pretraining loss", pname)
    fig.suptitle(f"{split}: levels against pretraining loss (n = {len(a['runs'])})", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _plot_slopes(split: str, sp: Mapping, path: Path) -> Path:
    import matplotlib.pyplot as plt

    from opgen.sweep import save_png as _save

    a = sp["across"]["B_vs_log10_tokens"]
    runs = {r["run"]: r for r in sp["runs"]}
    T = np.array([runs[r]["log10_tokens"] for r in a["runs"]])
    ps = [runs[r]["forms"]["linear_log"]["params"]["B"] for r in a["runs"]]
    y = np.array([p["estimate"] for p in ps])
    fig, ax = plt.subplots(figsize=(5.2, 4.0))
    ax.errorbar(T, y, yerr=np.array([_errbar(p) for p in ps]).T, fmt="o", color="C0", lw=0.8, ms=4)
    lf = a.get("linear_fit")
    if lf:
        ts = np.linspace(T.min(), T.max(), 20)
        ax.plot(ts, lf["intercept"]["estimate"] + lf["slope"]["estimate"] * ts, "-", color="C1", lw=1.2)
    _label(ax, f"{split}: B vs log10 tokens: Pearson {_with_ci(a['pearson'])}", "log10 pretraining tokens",
           "B (linear_log slope per decade of compute)")
    fig.tight_layout()
    return _save(fig, path)


def summary_lines(result: Mapping) -> Sequence[str]:
    lines = []
    for split, sp in sorted(result["splits"].items()):
        for r in sp["runs"]:
            parts = []
            for form, f in r["forms"].items():
                if "params" not in f:
                    continue
                ps = []
                for k, p in f["params"].items():
                    if p["estimate"] is None:
                        ps.append(f"{k}=n/a (not finite)")
                        continue
                    s = f"{k}={p['estimate']:.4g}"
                    if p["ci_low"] is not None:
                        s += f"[{p['ci_low']:.3g},{p['ci_high']:.3g}]" + ("" if p["bounded"] else "!")
                    ps.append(s)
                shape = f" [{f['shape']}]" if f.get("shape") else ""
                parts.append(f"{form}{shape}: " + " ".join(ps))
            lines.append(f"{split}/{r['run']} ({r['n_points']} pts): " + "; ".join(parts))
    return lines
