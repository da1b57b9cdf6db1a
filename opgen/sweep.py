"""Checkpoint sweeps: one table row per evaluated model, and plots of accuracy over checkpoints.

Reads what `opgen eval` wrote for each model (metrics.json and the scorer's per-row scores.jsonl),
so a sweep can be rebuilt from an output folder without generating again.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

_STEP = re.compile(r"(?:global_step|checkpoint|ckpt|step|iter)[-_]?(\d+)", re.IGNORECASE)

PLOTS = ("sweep_accuracy.png", "sweep_depth.png")


def checkpoint_step(name: str) -> int | None:
    """The training step a checkpoint name carries (rl-mda-step50 -> 50, checkpoint-200 -> 200)."""
    found = _STEP.findall(name)
    if found:
        return int(found[-1])
    return int(name) if name.isdigit() else None


def scope_of(op_ids) -> str:
    from opgen.score.metrics import scope_of as of

    return of(op_ids)


def _proportion(correct: int, n: int) -> dict:
    from opgen.score.metrics import wilson

    lo, hi = wilson(correct, n)
    return {"n": n, "acc": correct / n if n else None, "ci_low": lo if n else None, "ci_high": hi if n else None}


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def model_records(model_dir: Path, metrics: Mapping, decomposed: bool = False) -> list[dict]:
    """The scorer's per-response records of one model over all its data files (scores.jsonl lines),
    each tagged with its data file; ``split`` falls back to the data file's name."""
    records = []
    for dn, entry in metrics["data"].items():
        e = entry.get("decomposed") if decomposed else entry
        if not e or "scores" not in e:
            continue
        for rec in _read_jsonl(model_dir / e["scores"] / "scores.jsonl"):
            rec["data"] = dn
            rec["split"] = rec.get("split") or dn
            records.append(rec)
    return records


def correct(rec: Mapping) -> bool:
    """Whether a scores record is a correct answer (accuracy 1); the sweep and the fit count these."""
    return float(rec.get("acc", 0.0)) >= 1.0


def sweep_row(name: str, model_dir: Path, metrics: Mapping) -> dict:
    """One model's line of the sweep: accuracy overall, by data file and by depth (95% Wilson
    intervals), the arity-error and chimera rates over recall blocks, truncations, decomposed accuracy."""
    recs = model_records(model_dir, metrics)
    row: dict = {"model": name, "step": checkpoint_step(name),
                 "overall": _proportion(sum(map(correct, recs)), len(recs)), "by_split": {}, "by_depth": {}}
    for key, field in (("by_split", "split"), ("by_depth", "depth")):
        groups: dict = {}
        for r in recs:
            if field == "depth" and not (isinstance(r.get("depth"), int) and r["depth"] >= 0):
                continue
            groups.setdefault(r[field], []).append(correct(r))
        row[key] = {str(k): _proportion(sum(v), len(v)) for k, v in sorted(groups.items())}
    # Depth columns per data file: depth 4 of held-out trees and depth 4 of train-operator chains
    # are different quantities, so pooled depth columns exist only when one data file was scored.
    per_data: dict = {}
    for r in recs:
        if isinstance(r.get("depth"), int) and r["depth"] >= 0:
            per_data.setdefault(r["data"], {}).setdefault(r["depth"], []).append(correct(r))
    row["by_data_depth"] = {dn: {str(d): _proportion(sum(v), len(v)) for d, v in sorted(g.items())}
                            for dn, g in sorted(per_data.items())}
    if len({r["data"] for r in recs}) > 1:
        row["by_depth"] = {}
    # Roll-ups by role: ID/OOD/total, the arity tables and rates come from eval files only; each
    # probe file reports per condition on its own (opgen.score.metrics.file_role).
    roles = data_roles(metrics)
    evals = [r for r in recs if roles.get(r["data"], "eval") == "eval"]
    row["roles"] = {dn: roles[dn] for dn in sorted(roles)}
    scoped: dict = {"id": [], "ood": [], "total": []}
    scope_files: dict = {"id": {}, "ood": {}, "total": {}}
    for r in evals:
        scope = r.get("scope") or scope_of(r.get("ops"))
        for k in ((scope, "total") if scope in ("id", "ood") else ("total",)):
            scoped[k].append(correct(r))
            scope_files[k][r["data"]] = scope_files[k].get(r["data"], 0) + 1
    row["scope"] = {k: {**_proportion(sum(v), len(v)), "files": dict(sorted(scope_files[k].items()))}
                    for k, v in scoped.items()}
    plain = [correct(r) for r in evals if r.get("degenerate") is False]
    row["non_degenerate"] = _proportion(sum(plain), len(plain))
    from opgen.score.metrics import arity_by_distance

    drift = drift_call_of(metrics)
    row["metric_definitions"] = {"drift_call": drift}
    row["arity_by_distance"] = arity_by_distance(evals, drift_call=drift)
    row.update(arity_rates(evals))
    row["probes"] = {}
    for dn in sorted(d for d, role in roles.items() if role == "probe"):
        prs = [r for r in recs if r["data"] == dn]
        conds: dict = {}
        for r in prs:
            conds.setdefault(str(r.get("condition") or ""), []).append(correct(r))
        row["probes"][dn] = {"rows": len(prs),
                             "by_condition": {c: _proportion(sum(v), len(v)) for c, v in sorted(conds.items())},
                             "arity_by_distance": arity_by_distance(prs, drift_call=drift), **arity_rates(prs)}
    row["sources"] = {"scope": row["scope"]["total"]["files"],
                      "arity": {dn: n for dn, n in sorted(Counter(r["data"] for r in evals
                                                                  for _ in (r.get("recalls") or [])).items())}}
    # Program responses that fail only for want of the native module's imports (opgen score
    # --namespace native runs them with those names): a large share means the wrong namespace.
    programs = [r for r in recs if r.get("mode") == "program"]
    row["missing_import_rate"] = (sum(r.get("error") == "missing_import" for r in programs) / len(programs)
                                  if programs else None)
    samples = sum(e["generation"]["samples"] for e in metrics["data"].values())
    cut = sum(e["generation"]["truncated_samples"] for e in metrics["data"].values())
    row["truncated_rate"] = cut / samples if samples else None
    dec = model_records(model_dir, metrics, decomposed=True)
    row["decomposed"] = _proportion(sum(map(correct, dec)), len(dec)) if dec else None
    return row


STUDY_ARITY_OP = "func_24"  # the study's arity error is this operator's (compgen-checkpoints)


def data_roles(metrics: Mapping) -> dict[str, str]:
    """Each scored data file's role as its summary records it (``eval`` when it predates roles)."""
    out = {}
    for dn, e in metrics["data"].items():
        role = ((e.get("summary") or {}).get("role") or {}).get("role") if isinstance(e, Mapping) else None
        out[dn] = role or "eval"
    return out


def drift_call_of(metrics: Mapping) -> str:
    """The --drift-call the model's files were scored with (the study's farthest call before it existed)."""
    for e in metrics["data"].values():
        defs = ((e.get("summary") or {}).get("metric_definitions") or {}) if isinstance(e, Mapping) else {}
        if defs.get("drift_call"):
            return str(defs["drift_call"])
    return "farthest"


def arity_rates(recs: Sequence[Mapping]) -> dict:
    """The study's arity error (func_24's recall blocks written without the argument) and, under its
    own name, the rate over every operator's blocks; with the block counts behind each."""
    blocks = [rc for r in recs for rc in (r.get("recalls") or [])]
    f24 = [rc for rc in blocks if rc.get("op") == STUDY_ARITY_OP]

    def rate(bs, verdict):
        return sum(rc.get("verdict") == verdict for rc in bs) / len(bs) if bs else None

    return {"recall_blocks": len(blocks), "arity_error_rate": rate(f24, "arity"), "func_24_blocks": len(f24),
            "arity_error_rate_all_ops": rate(blocks, "arity"), "chimera_rate": rate(blocks, "chimera")}


def build_sweep(out_dir: Path, all_metrics: Sequence[Mapping]) -> list[dict]:
    rows = [sweep_row(m["model"], Path(out_dir) / m["model"], m) for m in all_metrics]
    if all(r["step"] is not None for r in rows):
        rows.sort(key=lambda r: (r["step"], r["model"]))
    return rows


def _flat(row: Mapping) -> dict:
    out = {"model": row["model"], "step": "" if row["step"] is None else row["step"]}

    def put(prefix: str, p: Mapping | None) -> None:
        for k in ("acc", "ci_low", "ci_high", "n"):
            v = None if p is None else p.get(k)
            out[f"{prefix}{'' if k == 'acc' else '_' + k}"] = "" if v is None else (round(v, 6) if k != "n" else v)

    put("accuracy", row["overall"])
    for split, p in row["by_split"].items():
        put(f"acc[{split}]", p)
    for d, p in row["by_depth"].items():
        put(f"acc[d={d}]", p)
    for dn, depths in row.get("by_data_depth", {}).items():
        for d, p in depths.items():
            put(f"acc[{dn}|d={d}]", p)
    for k in ("id", "ood", "total"):
        put(f"{k}_accuracy", row.get("scope", {}).get(k))
    put("non_degenerate_accuracy", row.get("non_degenerate"))
    for op, buckets in row.get("arity_by_distance", {}).items():
        for b, d in buckets.items():
            put(f"arity[{op}|{b}]", {"acc": d["rate"] if d["written"] else None, "ci_low": d["ci_low"],
                                     "ci_high": d["ci_high"], "n": d["written"]})
    for k in ("arity_error_rate", "arity_error_rate_all_ops", "chimera_rate", "missing_import_rate",
              "truncated_rate"):
        out[k] = "" if row.get(k) is None else round(row[k], 6)
    out["func_24_blocks"] = row.get("func_24_blocks", "")
    for dn, pr in row.get("probes", {}).items():
        for c, p in pr["by_condition"].items():
            put(f"probe[{dn}|{c}]", p)
    # which files (rows) made the roll-ups: "name:rows;name:rows"
    for k, files in row.get("sources", {}).items():
        out[f"{k}_files"] = ";".join(f"{dn}:{n}" for dn, n in files.items())
    put("decomposed_accuracy", row["decomposed"])
    return out


def to_csv(rows: Sequence[Mapping]) -> str:
    flat = [_flat(r) for r in rows]
    columns: list[str] = []
    for f in flat:
        columns.extend(c for c in f if c not in columns)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(flat)
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    from opgen import files

    files.atomic_write_bytes(path, data)


PLOTS_MISSING = ("sweep plots skipped: matplotlib is not installed (pip install 'opgen[plots]'); "
                 "sweep.csv and sweep.json are complete")


def write_sweep(out_dir: Path, all_metrics: Sequence[Mapping], notes: list[str] | None = None,
                plots: bool = True) -> list[Path]:
    """DIR/sweep.csv, DIR/sweep.json and (with matplotlib) the two PNGs; returns the paths written.
    The tables are written first; a plot that cannot be drawn (no matplotlib, a plotting error) is
    one line in ``notes``, never a lost table."""
    out_dir = Path(out_dir)
    rows = build_sweep(out_dir, all_metrics)
    written = [out_dir / "sweep.csv", out_dir / "sweep.json"]
    _write_atomic(written[0], to_csv(rows).encode("utf-8"))
    _write_atomic(written[1], (json.dumps(rows, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    if not plots:
        return written
    notes = [] if notes is None else notes
    try:
        import matplotlib  # noqa: F401 - only to learn whether the plots can be drawn
    except ImportError:
        notes.append(PLOTS_MISSING)
        return written
    try:
        written.extend(plot(rows, out_dir))
    except Exception as exc:  # a plot is a view of sweep.json; it never takes the tables down
        import matplotlib.pyplot as plt

        plt.close("all")
        notes.append(f"sweep plots not drawn: {type(exc).__name__}: {exc}")
    return written


def plot(rows: Sequence[Mapping], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    by_step = all(r["step"] is not None for r in rows)
    xs = [r["step"] for r in rows] if by_step else list(range(len(rows)))
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = [("overall", [r["overall"] for r in rows])]
    splits = sorted({s for r in rows for s in r["by_split"]})
    if len(splits) > 1:  # one split is the overall line again
        for split in splits:
            series.append((split, [r["by_split"].get(split) for r in rows]))
    if any(r["decomposed"] for r in rows):
        series.append(("decomposed", [r["decomposed"] for r in rows]))
    for label, props in series:
        pts = [(x, p) for x, p in zip(xs, props) if p and p["acc"] is not None]
        if not pts:
            continue
        x = [a for a, _ in pts]
        ax.plot(x, [p["acc"] for _, p in pts], marker="o", label=label)
        ax.fill_between(x, [p["ci_low"] for _, p in pts], [p["ci_high"] for _, p in pts], alpha=0.15)
    ax.set_xlabel("checkpoint step" if by_step else "checkpoint")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not by_step:
        ax.set_xticks(xs, [r["model"] for r in rows], rotation=30, ha="right")
    paths.append(_finish(fig, ax, "accuracy (95% CI)", "accuracy vs checkpoint", out_dir / PLOTS[0]))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        per_data = r.get("by_data_depth") or {"": r["by_depth"]}
        for dn, depths in per_data.items():
            pts = sorted((int(d), p) for d, p in depths.items() if p["acc"] is not None)
            if pts:
                label = r["model"] if len(per_data) == 1 else f"{r['model']} {dn}"
                ax.plot([d for d, _ in pts], [p["acc"] for _, p in pts], marker="o", label=label)
    ax.set_xlabel("expression depth")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    paths.append(_finish(fig, ax, "accuracy", "accuracy vs depth, per checkpoint", out_dir / PLOTS[1]))
    return paths


def _finish(fig, ax, ylabel: str, title: str, path: Path) -> Path:
    """The accuracy axis, legend and title both plots share, then the file."""
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return save_png(fig, path)


def save_png(fig, path: Path) -> Path:
    """Write a matplotlib figure as a PNG, atomically and byte-stable (no version stamp); closes it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})  # no version stamp: equal inputs, equal bytes
    plt.close(fig)
    _write_atomic(path, buf.getvalue())
    return path


def load_metrics(out_dir: Path) -> list[dict]:
    """metrics.json of every finished model under an eval output folder, in name order."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(out_dir).glob("*/metrics.json"))]
