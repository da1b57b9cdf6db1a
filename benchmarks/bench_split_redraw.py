"""What the mcd redraw rule leaves: a drawing generator's kept rows against the rows it would draw without it.

    python benchmarks/bench_split_redraw.py                  # every scenario, their default rows
    python benchmarks/bench_split_redraw.py --rows 2000      # fewer rows a scenario (a quick look)
    python benchmarks/bench_split_redraw.py --scenario eco-mcd-rl-r1 --top 20
    python benchmarks/bench_split_redraw.py --recipe my.yaml # a recipe's own drawing train splits
    python benchmarks/bench_split_redraw.py --json

On an mcd split a training split whose generator draws rows (``rl_pool``, ``trees``, ``chains``, ...)
draws again around the search's held-out compounds H (docs/splits.md, "Training cells on a split";
``Rule.wrap`` in opgen/splits/kinds/, counted under ``rejections.split``). No bundled recipe has
such a split (``split-mcd`` takes both sides from the search, ``sft-eco-mcd``'s cell takes its
compositions from the search's train side), so the scenarios pair the bundled recipes' mcd splits
with the bundled drawing cells a user would put on them:

- ``eco-mcd-trees``: sft-eco-mcd's split, a ``trees`` split with its pool's options (train ops, d2-4)
- ``eco-mcd-rl-r1``: sft-eco-mcd's split, rl-r1's ``rl_pool`` (train-op chains d10-20 | atomic groups)
- ``mcd-trees``: split-mcd's split, a ``trees`` split with its pool's options (all ops, d2-4)
- ``mcd-chains``: split-mcd's split, a ``chains`` split over all operators, depths 2-6

Row ``i`` without the rule is the generator's first candidate that meets its local constraints
(``type(gen).first_valid``: the rule is an instance attribute over it); with the rule it is the
first such candidate that holds no compound of H (``gen.first_valid``, what the build writes; the
build's duplicate redraws come after both and are not part of this). The two samples share every
row whose first candidate holds no compound of H, so each cell's shift (kept − without) is tested
paired, row by row: a ratio ``Σa/Σb`` is linearised per row (the delta method) and the shift's
standard error is the per-row differences' (z = shift / se). A cell is significant when |z| passes
a Bonferroni bound over the scenario's cells (two-sided 0.05). Cells, per task depth: the depth
histogram (share of tasks), operator frequencies (share of the depth's nodes, ``+`` and methods
included), literal share (of leaves), program length (characters of the expression), distinct
operators per program, and per-operator positions (an operator's share of its occurrences at each
distance from the root); ``composed_depth`` is the depth histogram of the tasks that compose
(depth 2 or more), apart from a pool's atomic tasks. Figures: docs/splits.md, "What the redraw leaves".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import yaml

from opgen import expr as E
from opgen import recipe as R
from opgen.splits import compounds as C

ROOT = Path(__file__).resolve().parents[1]
# A cell is tested when both samples' denominators reach MIN_DENOMINATOR (tasks, nodes, leaves or an
# operator's occurrences) and either numerator reaches MIN_NUMERATOR: the normal approximation of a
# rarer cell's z is not worth a Bonferroni bound.
MIN_DENOMINATOR = 100
MIN_NUMERATOR = 10
# The depth histograms: a depth's share of the row's tasks, and of its tasks that compose (depth >= 2).
DEPTH_FAMILIES = {"depth_share": "_tasks", "composed_depth": "_ctasks"}
FAMILIES = ("depth_share", "composed_depth", "op_share", "literal_share", "program_chars", "distinct_ops", "position")


def _bundled(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "datasets" / f"{name}.yaml").read_text())


def _rl_r1_train() -> dict[str, Any]:
    raw = dict(_bundled("rl-r1")["splits"]["train"])
    raw.pop("family", None)
    return raw


def scenarios() -> dict[str, tuple[str, dict[str, Any], int]]:
    """name → (the bundled recipe whose split it uses, its drawing train split, default rows)."""
    eco_pool = _bundled("sft-eco-mcd")["split"]["pool"]["options"]
    mcd_pool = _bundled("split-mcd")["split"]["pool"]["options"]
    trees = {"generator": "trees", "role": "train", "kind": "rl", "unique": "task"}
    return {
        "eco-mcd-trees": ("sft-eco-mcd", {**trees, "options": {"ops": eco_pool["ops"], "depths": eco_pool["depths"],
                                                               "rows": 20000}}, 20000),
        "eco-mcd-rl-r1": ("sft-eco-mcd", _rl_r1_train(), 12800),
        "mcd-trees": ("split-mcd", {**trees, "options": {"ops": mcd_pool["ops"], "depths": mcd_pool["depths"],
                                                         "rows": 20000}}, 20000),
        "mcd-chains": ("split-mcd", {"generator": "chains", "role": "train", "kind": "rl", "unique": "task",
                                     "options": {"ops": "all", "depths": [2, 3, 4, 5, 6], "rows": 20000}}, 20000),
    }


def scenario_recipe(name: str) -> tuple[R.Recipe, R.SplitConfig]:
    base, split, _ = scenarios()[name]
    b = _bundled(base)
    data = {"name": f"redraw-{name}", "seed": b.get("seed", 0), "split": b["split"],
            "defaults": b.get("defaults", {}), "splits": {"train": split}}
    rec = R.resolve(data, f"{name}.yaml")
    return rec, rec.splits[0]


# ---------------------------------------------------------------- per-row cells


def _row_cells(item: Any) -> dict[str, tuple[float, float]]:
    """The row's contribution (numerator, denominator) to every cell it touches."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])

    def add(key: str, a: float, b: float) -> None:
        cell = out[key]
        cell[0] += a
        cell[1] += b

    tasks = item.tasks
    depths = [E.depth(t.program) for t in tasks]
    for d in set(depths):
        add(f"depth_share|d{d}", depths.count(d), 0)  # denominators: shared_denominator (the row's tasks)
        if d > 1:
            add(f"composed_depth|d{d}", depths.count(d), 0)  # (the row's tasks of depth 2 or more)
    out["_tasks"][0] += len(tasks)
    out["_ctasks"][0] += sum(1 for d in depths if d > 1)
    for t, d in zip(tasks, depths):
        prog = t.program
        nodes: list[tuple[str, int]] = []
        stack = [(prog, 0)]
        while stack:
            node, level = stack.pop()
            nodes.append((C.label(node), level))
            stack.extend((k, level + 1) for k in E.children(node))
        inner = [(lab, lv) for lab, lv in nodes if not (lab == "x" or lab.startswith("lit:"))]
        leaves = len(nodes) - len(inner)
        lits = sum(1 for lab, _ in nodes if lab.startswith("lit:"))
        add(f"literal_share|d{d}", lits, leaves)
        add(f"program_chars|d{d}", len(E.render(prog)), 1)
        add(f"distinct_ops|d{d}", E.k_distinct(prog), 1)
        for dd in (f"d{d}", "all"):  # per depth, and over every depth
            for lab, lv in inner:
                add(f"op_share|{dd}|{lab}", 1, 0)  # denominators: shared_denominator (the depth's nodes)
                add(f"position|{dd}|{lab}|l{lv}", 1, 0)  # (the operator's occurrences)
                out[f"_op|{dd}|{lab}"][0] += 1
            out[f"_nodes|{dd}"][0] += len(inner)
    return {k: (v[0], v[1]) for k, v in out.items()}


def shared_denominator(key: str) -> str | None:
    """The row total a cell divides by, when it is not the cell's own: a depth's share of the row's
    tasks, an operator's share of the depth's nodes, a position's share of the operator's occurrences.
    A row without the cell still counts that total (its numerator is 0)."""
    kind, *rest = key.split("|")
    if kind in DEPTH_FAMILIES:
        return DEPTH_FAMILIES[kind]
    if kind == "op_share":
        return f"_nodes|{rest[0]}"
    if kind == "position":
        return f"_op|{rest[0]}|{rest[1]}"
    return None


@dataclass
class Sample:
    """Per-row (numerator, denominator) of every cell, for the rows kept and the rows without the rule."""

    kept: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    without: list[dict[str, tuple[float, float]]] = field(default_factory=list)
    redrawn: int = 0  # rows whose first candidate held a compound of H
    composed: int = 0  # rows whose first candidate composes at all (a task of depth 2 or more): the rule's reach
    split_rejections: int = 0  # candidates the rule rejected
    cpu_s: float = 0.0


def draw(gen: Any, rows: int) -> Sample:
    """Rows 0..rows-1 with the rule (``gen.first_valid``) and without it (the class's ``first_valid``)."""
    s = Sample()
    base = type(gen).first_valid
    before = gen.rejections["split"]
    c0 = time.process_time()
    with E.recursion_headroom():
        for i in range(rows):
            j0, plain = base(gen, i)
            j, kept = gen.first_valid(i)
            if j != j0:
                s.redrawn += 1
            if any(E.depth(t.program) > 1 for t in plain.tasks):
                s.composed += 1
            s.kept.append(_row_cells(kept))
            s.without.append(_row_cells(plain))
    s.split_rejections = gen.rejections["split"] - before
    s.cpu_s = time.process_time() - c0
    return s


# ---------------------------------------------------------------- the paired comparison


@dataclass(frozen=True)
class Cell:
    key: str
    kept: float
    without: float
    shift: float
    se: float
    z: float
    n_kept: float  # the cell's denominator summed over the kept rows (tasks, nodes, leaves, occurrences)

    @property
    def relative(self) -> float:
        return self.shift / self.without if self.without else math.inf


def compare(sample: Sample) -> tuple[list[Cell], int]:
    """Every cell's kept and without-the-rule ratios, their shift, its paired standard error and z;
    and how many cells were too sparse to test (a denominator under MIN_DENOMINATOR in either sample,
    or a numerator under MIN_NUMERATOR in both)."""
    n = len(sample.kept)
    zero = (0.0, 0.0)
    # one pass. Per row total (shared denominators): Σb1 Σb2 Σb1² Σb2² Σb1b2 (1: kept, 2: without);
    # per cell: Σa1 Σa2 Σa1² Σa2² Σa1a2 Σa1b1 Σa2b2 Σa1b2 Σb1a2, and its own b sums when it has no shared one
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0] * 14)
    for k_row, w_row in zip(sample.kept, sample.without):
        for key in k_row.keys() | w_row.keys():
            if key.startswith("_"):
                b1, b2 = k_row.get(key, zero)[0], w_row.get(key, zero)[0]
                t = totals[key]
                t[0] += b1
                t[1] += b2
                t[2] += b1 * b1
                t[3] += b2 * b2
                t[4] += b1 * b2
                continue
            a1, b1 = k_row.get(key, zero)
            a2, b2 = w_row.get(key, zero)
            shared = shared_denominator(key)
            if shared is not None:
                b1, b2 = k_row.get(shared, zero)[0], w_row.get(shared, zero)[0]
            c = acc[key]
            for idx, v in enumerate((a1, a2, a1 * a1, a2 * a2, a1 * a2, a1 * b1, a2 * b2, a1 * b2, b1 * a2,
                                     b1, b2, b1 * b1, b2 * b2, b1 * b2)):
                c[idx] += v
    out, sparse = [], 0
    for key in sorted(acc):
        sa1, sa2, a1a1, a2a2, a1a2, a1b1, a2b2, a1b2, b1a2, *own = acc[key]
        shared = shared_denominator(key)
        sb1, sb2, b1b1, b2b2, b1b2 = totals[shared] if shared is not None else own
        if min(sb1, sb2) < MIN_DENOMINATOR or max(sa1, sa2) < MIN_NUMERATOR:
            sparse += 1
            continue
        rk, rw = sa1 / sb1, sa2 / sb2
        mk, mw = sb1 / n, sb2 / n
        # d_i = u_i - v_i, u = (a1 - rk b1) / mk, v = (a2 - rw b2) / mw; Σu = Σv = 0 by construction
        uu = (a1a1 - 2 * rk * a1b1 + rk * rk * b1b1) / (mk * mk)
        vv = (a2a2 - 2 * rw * a2b2 + rw * rw * b2b2) / (mw * mw)
        uv = (a1a2 - rw * a1b2 - rk * b1a2 + rk * rw * b1b2) / (mk * mw)
        var = max(uu + vv - 2 * uv, 0.0) / (n - 1) if n > 1 else 0.0
        se = math.sqrt(var / n)
        shift = rk - rw
        z = shift / se if se > 1e-12 else 0.0
        out.append(Cell(key, rk, rw, shift, se, z, sb1))
    return out, sparse


def bonferroni(m: int, alpha: float = 0.05) -> float:
    return NormalDist().inv_cdf(1 - alpha / (2 * max(m, 1)))


def summary(name: str, sample: Sample, cells: list[Cell], sparse: int, top: int) -> dict[str, Any]:
    rows = len(sample.kept)
    bound = bonferroni(len(cells))
    significant = sorted((c for c in cells if abs(c.z) > bound), key=lambda c: -abs(c.z))
    families: dict[str, dict[str, Any]] = {}
    for fam in FAMILIES:
        fc = [c for c in cells if c.key.startswith(fam + "|")]
        if not fc:
            continue
        big = max(fc, key=lambda c: abs(c.shift))
        families[fam] = {"cells": len(fc), "significant": sum(1 for c in fc if abs(c.z) > bound),
                         "max_abs_shift": round(big.shift, 5), "at": big.key, "without": round(big.without, 5),
                         "kept": round(big.kept, 5), "z": round(big.z, 2)}
    return {
        "scenario": name, "rows": rows, "redrawn_rows": sample.redrawn, "split_rejections": sample.split_rejections,
        "acceptance_share": round(rows / (rows + sample.split_rejections), 4),
        "composed_rows": sample.composed,
        "composed_acceptance_share": round(sample.composed / (sample.composed + sample.split_rejections), 4)
        if sample.composed else None,
        "redrawn_share": round(sample.redrawn / rows, 4), "cells": len(cells), "sparse_cells": sparse,
        "bonferroni_z": round(bound, 2),
        "significant_cells": len(significant), "cpu_s": round(sample.cpu_s, 1), "families": families,
        "top": [{"cell": c.key, "without": round(c.without, 5), "kept": round(c.kept, 5), "shift": round(c.shift, 5),
                 "relative": round(c.relative, 3), "z": round(c.z, 1)} for c in significant[:top]],
    }


def measure(rec: R.Recipe, cfg: R.SplitConfig,
            rows: int | None = None) -> tuple[Sample, list[Cell], int, list[str]]:
    """The split's first ``rows`` rows with and without the rule, compared: (sample, cells, sparse, H)."""
    gen = R.build_generator(cfg, rec)
    if "first_valid" not in vars(gen):  # Rule.wrap sets it on the instance
        raise SystemExit(f"{cfg.where}: the split's generator is not held to the mcd rule (nothing to measure)")
    n = min(rows or gen.count(), gen.count())
    held = sorted(rec.split.impl.selection(rec.split, rec.seed)[1].heldout)
    sample = draw(gen, n)
    cells, sparse = compare(sample)
    return sample, cells, sparse, held


def _print(res: dict[str, Any], held: Iterable[str]) -> None:
    held = list(held)
    print(f"\n== {res['scenario']}: {res['rows']} rows, H = {len(held)} compounds "
          f"({', '.join(held[:6])}{', ...' if len(held) > 6 else ''})")
    print(f"acceptance share (rows / (rows + split rejections)): {res['acceptance_share']:.4f}; "
          f"rows redrawn: {res['redrawn_rows']} ({res['redrawn_share']:.2%}); {res['split_rejections']} candidates "
          f"rejected; {res['cpu_s']} s CPU")
    if res["composed_acceptance_share"] is not None and res["composed_rows"] != res["rows"]:
        print(f"among the {res['composed_rows']} rows that compose (the others hold no compound): acceptance "
              f"share {res['composed_acceptance_share']:.4f}, redrawn {res['redrawn_rows'] / res['composed_rows']:.2%}")
    print(f"{res['cells']} cells tested, {res['significant_cells']} significant (|z| > {res['bonferroni_z']}, "
          f"Bonferroni 0.05); {res['sparse_cells']} too sparse to test")
    print(f"  {'family':14s} {'cells':>6s} {'signif':>6s} {'max |shift|':>11s}  at (without -> kept, z)")
    for fam, f in res["families"].items():
        print(f"  {fam:14s} {f['cells']:6d} {f['significant']:6d} {f['max_abs_shift']:11.5f}  {f['at']} "
              f"({f['without']} -> {f['kept']}, z {f['z']})")
    if res["top"]:
        print(f"  {'significant cell':36s} {'without':>9s} {'kept':>9s} {'shift':>9s} {'rel':>7s} {'z':>6s}")
    for c in res["top"]:
        print(f"  {c['cell']:36s} {c['without']:9.4f} {c['kept']:9.4f} {c['shift']:9.4f} {c['relative']:7.1%} "
              f"{c['z']:6.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", choices=sorted(scenarios()), help="default: every scenario")
    ap.add_argument("--recipe", help="a recipe file with an mcd split: measure its drawing train splits instead")
    ap.add_argument("--rows", type=int, help="rows a scenario (default: the scenario's, or the split's count)")
    ap.add_argument("--top", type=int, default=12, help="significant cells printed, largest |z| first")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    jobs: list[tuple[str, R.Recipe, R.SplitConfig, int | None]] = []
    if a.recipe:
        try:
            rec = R.load(a.recipe)
        except R.RecipeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if rec.split is None or rec.split.kind != "mcd":
            print(f"error: {a.recipe}: split: the recipe has no mcd split (nothing is redrawn around one)",
                  file=sys.stderr)
            return 2
        picked = [s for s in rec.splits if s.role == "train" and s.generator not in ("mcd_side", "sft_cell",
                                                                                     "matched_stream")]
        if not picked:
            print(f"error: {a.recipe}: splits: no training split draws rows (mcd_side, sft_cell and matched_stream "
                  "take the search's sides; nothing is redrawn)", file=sys.stderr)
            return 2
        jobs = [(f"{rec.name}:{s.name}", rec, s, a.rows) for s in picked]
    else:
        for name in a.scenario or list(scenarios()):
            rec, cfg = scenario_recipe(name)
            jobs.append((name, rec, cfg, a.rows or scenarios()[name][2]))
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    results = []
    for name, rec, cfg, rows in jobs:
        try:
            sample, cells, sparse, held = measure(rec, cfg, rows)
        except R.RecipeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        res = summary(name, sample, cells, sparse, a.top)
        res["heldout_compounds"] = held
        results.append(res)
        if not a.json:
            _print(res, held)
    if a.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
