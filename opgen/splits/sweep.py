"""CFQ's protocol in one command (``opgen split-sweep``, docs/splits.md "The divergence sweep"):
splits of one pool at increasing compound divergence, each a normal build with its certificate.

From an ``mcd`` recipe, the sweep measures a random split of its pool (the ``random`` level: the
exchange search with no rounds, its starting split) and the highest D_C the exchange search reaches
(no target), then builds, for every target level from the first multiple of ``step`` above the
random one up to that maximum, ``per_level`` splits (``replicate`` 0, 1, ...: other searches of the
same pool, whose rows the builds share) with ``target_compound_divergence`` set to the level, all
at D_A within ``max_atom_divergence``. Every split is ``opgen build`` of a recipe written beside
its rows (``DIR/<level>/<replicate>/recipe.yaml``), so its manifest holds its certificate and any of
them rebuilds alone. The sweep writes a table (``sweep.json``, ``sweep.csv``, ``sweep.md``) and a
plot of D_C and D_A per split (``sweep.svg``), and names the highest D_C reached beside CFQ's.
"""

from __future__ import annotations

import csv
import json
import math
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from opgen import build, write
from opgen import recipe as R
from opgen.errors import OpgenError
from opgen.splits import mcd, table

# DBCA's CFQ MCD splits (Keysers et al., ICLR 2020, table 2): D_C at D_A <= 0.02.
CFQ = {"MCD1": 0.694, "MCD2": 0.713, "MCD3": 0.704}
DEFAULT_STEP = 0.1
DEFAULT_PER_LEVEL = 3
RANDOM = "random"
MAX = "max"  # the level of the untargeted search: the highest D_C the search reaches, built too


class SweepError(ValueError, OpgenError):
    """A sweep that cannot run (not an mcd recipe, a bad level); the message names what."""

    exit_code = 1


@dataclass(frozen=True)
class Plan:
    levels: list[str]  # "random", then "0.10", "0.20", ..., then "max"
    random: dict[str, Any]  # the pool's random-split baseline
    maximum: float  # the highest D_C the exchange search reached, untargeted


def _raw(recipe: R.Recipe) -> dict[str, Any]:
    return json.loads(json.dumps(recipe.raw))


def _split_of(recipe: R.Recipe) -> dict[str, Any]:
    split = recipe.raw.get("split")
    if recipe.split is None or recipe.split.kind != "mcd" or not isinstance(split, dict):
        kind = recipe.split.kind if recipe.split is not None else "none"
        raise SweepError(f"{recipe.path}: split: a divergence sweep needs an mcd split (this recipe's: {kind})")
    return split


def variant(recipe: R.Recipe, level: str, replicate: int, bound: float) -> dict[str, Any]:
    """The recipe of one split of the sweep: the exchange search at ``level`` (no rounds at the random
    level; no target at the max level), the ``replicate``-th search over the same pool."""
    _split_of(recipe)
    data = _raw(recipe)
    split = {k: v for k, v in data["split"].items()
             if k not in ("candidates", "steps", "temperature", "target_compound_divergence")}
    split.update(search="exchange", max_atom_divergence=bound, replicate=replicate)
    if level == RANDOM:
        split["rounds"] = 0
    elif level != MAX:
        split["target_compound_divergence"] = float(level)
    data["split"] = split
    data["seed"] = recipe.seed  # the seed the sweep was given (--seed), written into each split's recipe
    data["name"] = f"{recipe.name}-{level}-{replicate}"
    data.pop("library", None)  # the sweep's recipes are resolved over the library the original resolved
    return data


def plan(recipe: R.Recipe, bound: float, step: float = DEFAULT_STEP, levels: Sequence[float] | None = None) -> Plan:
    """The random baseline of the recipe's pool, the maximum D_C (the untargeted search), and the
    levels between."""
    if not 0 < step <= 1:
        raise SweepError(f"--step: {step} is not in (0, 1]")
    if levels is not None:
        bad = [x for x in levels if not 0 < x <= 1]
        if bad:
            raise SweepError(f"--levels: {bad[0]} is not a compound divergence in (0, 1]")
    top = R.resolve(variant(recipe, MAX, 0, bound), recipe.path, seed=recipe.seed, library=recipe.library)
    _, sel = mcd.pool_and_selection(top.split.config, recipe.seed, f"{recipe.path}: ", recipe.library)
    random_ = dict(sel.baseline)
    if levels is None:
        first = math.floor(random_["compound_divergence"]["mean"] / step + 1e-9) + 1
        chosen = [round(k * step, 6) for k in range(first, int(math.floor(sel.compound_divergence / step + 1e-9)) + 1)]
    else:
        chosen = sorted(set(levels))
    return Plan([RANDOM, *(f"{x:.2f}" for x in chosen), MAX], random_, sel.compound_divergence)


def run(recipe: R.Recipe, out: Path, *, per_level: int = DEFAULT_PER_LEVEL, bound: float = mcd.DEFAULT_ATOM_BOUND,
        step: float = DEFAULT_STEP, levels: Sequence[float] | None = None, workers: int = 1,
        say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Build the sweep into ``out`` (module docstring); returns the report also written there."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    say(f"drawing the pool of {recipe.split.config['pool']['rows']:,} rows, its random splits and the highest D_C "
        "the exchange search reaches...")
    swept = plan(recipe, bound, step, levels)
    say(f"pool of {recipe.split.config['pool']['rows']:,} rows: random splits D_C "
        f"{swept.random['compound_divergence']['mean']:.4f}, the exchange search reaches {swept.maximum:.4f}; "
        f"levels {', '.join(swept.levels)}, {per_level} splits each")
    rows = []
    for level in swept.levels:
        for rep in range(per_level):
            where = out / level / f"split-{rep}"
            where.mkdir(parents=True, exist_ok=True)
            data = variant(recipe, level, rep, bound)
            path = where / "recipe.yaml"
            write.atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
            one = R.load(str(path), library=recipe.library)
            w0, c0 = time.perf_counter(), time.process_time()
            man = build.build([one], where / "rows", workers=workers, force=True)
            cert = man["split_certificates"][one.name]
            rows.append({
                "level": level, "replicate": rep, "recipe": str(path), "build": str(where / "rows"),
                "train_rows": cert["train_rows"], "eval_rows": cert["eval_rows"],
                "atom_divergence": cert["atom_divergence"], "compound_divergence": cert["compound_divergence"],
                "random_compound_divergence": cert["baseline"]["compound_divergence"]["mean"],
                "excess_compound_divergence": cert["excess_over_baseline"]["compound_divergence"],
                "heldout_compounds": len(cert["heldout_compounds"]), "check_ok": cert["check"]["ok"],
                "seconds": round(time.perf_counter() - w0, 1), "cpu_seconds": round(time.process_time() - c0, 1),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)})
            say(f"{level:>6} #{rep}: D_C {rows[-1]['compound_divergence']:.4f}, D_A "
                f"{rows[-1]['atom_divergence']:.4f} ({rows[-1]['seconds']} s, {rows[-1]['cpu_seconds']} s CPU)")
    report = summarize(recipe, swept, rows, per_level, bound)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    _write(out, report)
    return report


def summarize(recipe: R.Recipe, swept: Plan, rows: list[dict[str, Any]], per_level: int,
              bound: float) -> dict[str, Any]:
    by_level: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_level.setdefault(r["level"], []).append(r)
    levels: list[dict[str, Any]] = [
        {"level": lv, "splits": len(rs), "compound_divergence": table.spread([r["compound_divergence"] for r in rs]),
         "atom_divergence": table.spread([r["atom_divergence"] for r in rs])} for lv, rs in by_level.items()]
    means = [lv["compound_divergence"]["mean"] for lv in levels if lv["level"] != MAX]
    top = [lv["compound_divergence"]["mean"] for lv in levels if lv["level"] == MAX]
    best = max(rows, key=lambda r: r["compound_divergence"])
    return {"recipe": recipe.path, "pool_rows": recipe.split.config["pool"]["rows"],
            "train_rows": recipe.split.config["train_rows"], "eval_rows": recipe.split.config["eval_rows"],
            "compounds": recipe.split.spec.describe(), "max_atom_divergence": bound, "per_level": per_level,
            "random": swept.random, "maximum_untargeted": swept.maximum, "levels": levels,
            # the targeted levels rise level by level, and the untargeted splits reach at least the last
            "monotone": all(a < b for a, b in zip(means, means[1:])) and all(t >= means[-1] - 1e-6 for t in top),
            "highest": {"compound_divergence": best["compound_divergence"],
                        "atom_divergence": best["atom_divergence"], "level": best["level"]},
            "cfq_mcd": CFQ, "splits": rows}


def _write(out: Path, report: dict[str, Any]) -> None:
    write.atomic_write_text(out / "sweep.json", json.dumps(report, indent=2) + "\n")
    keys = ["level", "replicate", "compound_divergence", "atom_divergence", "random_compound_divergence",
            "excess_compound_divergence", "heldout_compounds", "train_rows", "eval_rows", "check_ok", "seconds",
            "cpu_seconds", "peak_rss_mib", "build"]
    with open(out / "sweep.csv.tmp", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(report["splits"])
    (out / "sweep.csv.tmp").replace(out / "sweep.csv")
    write.atomic_write_text(out / "sweep.md", render(report) + "\n")
    write.atomic_write_text(out / "sweep.svg", plot(report))


def render(report: dict[str, Any]) -> str:
    """The sweep's table, in Markdown (what the command prints)."""
    hi = report["highest"]
    cfq = ", ".join(f"{k} {v:.3f}" for k, v in report["cfq_mcd"].items())
    lines = [f"Divergence sweep of {report['recipe']}: pool {report['pool_rows']:,} rows → {report['train_rows']:,} "
             f"train / {report['eval_rows']:,} eval, D_A ≤ {report['max_atom_divergence']}; compounds: "
             f"{report['compounds']}",
             "",
             "| level | split | D_C | D_A | D_C of random splits | excess | held-out compounds | check | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["splits"]:
        lines.append(f"| {r['level']} | {r['replicate']} | {r['compound_divergence']:.4f} | {r['atom_divergence']:.4f}"
                     f" | {r['random_compound_divergence']:.4f} | {r['excess_compound_divergence']:+.4f} | "
                     f"{r['heldout_compounds']:,} | {'ok' if r['check_ok'] else 'FAILED'} | {r['seconds']} |")
    lines += ["", f"highest D_C reached: {hi['compound_divergence']:.4f} at D_A {hi['atom_divergence']:.4f} "
                  f"(level {hi['level']}); CFQ's MCD splits: {cfq} at D_A ≤ 0.02",
              f"mean D_C per level {'rises' if report['monotone'] else 'does NOT rise'} monotonically: "
              + ", ".join(f"{lv['level']} {lv['compound_divergence']['mean']:.4f}" for lv in report["levels"])]
    return "\n".join(lines)


def plot(report: dict[str, Any]) -> str:
    """D_C and D_A of every split against its level, as a small self-contained SVG (no plotting library)."""
    w, h, left, bottom, top, right = 640, 400, 60, 50, 30, 20
    levels = [lv["level"] for lv in report["levels"]]
    xs = {lv: left + (i + 0.5) * (w - left - right) / max(1, len(levels)) for i, lv in enumerate(levels)}

    def y(v: float) -> float:
        return h - bottom - v * (h - bottom - top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13">Divergence sweep: D_C (circles) and D_A (squares) per split '
             f'against its target level</text>']
    for t in range(0, 11, 2):
        v = t / 10
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for lv, x in xs.items():
        parts.append(f'<text x="{x:.1f}" y="{h - bottom + 18}" text-anchor="middle">{lv}</text>')
    cfq = sum(report["cfq_mcd"].values()) / len(report["cfq_mcd"])
    parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(cfq):.1f}" y2="{y(cfq):.1f}" stroke="#c44" '
                 f'stroke-dasharray="4 3"/><text x="{w - right}" y="{y(cfq) - 4:.1f}" text-anchor="end" '
                 f'fill="#c44">CFQ MCD D_C ≈ {cfq:.3f}</text>')
    reps = max(1, report["per_level"])
    for r in report["splits"]:
        x = xs[r["level"]] + (r["replicate"] - (reps - 1) / 2) * 8
        parts.append(f'<circle cx="{x:.1f}" cy="{y(r["compound_divergence"]):.1f}" r="4" fill="#2a6"/>')
        parts.append(f'<rect x="{x - 3:.1f}" y="{y(r["atom_divergence"]) - 3:.1f}" width="6" height="6" '
                     f'fill="#36c"/>')
    parts.append(f'<text x="{(w + left) / 2}" y="{h - 10}" text-anchor="middle">target compound divergence '
                 f'(random: the search\'s random start)</text></svg>')
    return "\n".join(parts) + "\n"
