"""Checkpoint sweeps: one table row per evaluated model, and plots of accuracy over checkpoints.

Reads what `opgen eval` wrote for each model: metrics.json, whose data files' summaries are added up
(never every response at once; a summary from before these tables existed is recomputed from its
scores.jsonl, one line at a time), so a sweep can be rebuilt from an output folder without
generating again.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

_STEP = re.compile(r"(?:global_step|checkpoint|ckpt|step|iter)[-_]?(\d+)", re.IGNORECASE)

PLOTS = ("sweep_accuracy.png", "sweep_depth.png")


def checkpoint_step(name: str) -> int | None:
    """The training step a checkpoint name carries (rl-mda-step50 -> 50, checkpoint-200 -> 200)."""
    found = _STEP.findall(name)
    if found:
        return int(found[-1])
    return int(name) if name.isdigit() else None


def _proportion(p: Mapping | None) -> dict:
    """A sweep cell of a combined proportion: n, acc and its interval (null when n is 0)."""
    p = p or {}
    return {"n": p.get("n", 0), "acc": p.get("acc"), "ci_low": p.get("ci_low"), "ci_high": p.get("ci_high")}


def _scores_lines(path: Path) -> Iterator[dict]:
    """The records of a scores.jsonl, one at a time."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def model_records(model_dir: Path, metrics: Mapping) -> Iterator[dict]:
    """The scorer's per-response records of one model over all its data files (scores.jsonl lines),
    one at a time, each tagged with its data file; ``split`` falls back to the data file's name."""
    for dn, entry in metrics["data"].items():
        if not entry or "scores" not in entry:
            continue
        for rec in _scores_lines(model_dir / entry["scores"] / "scores.jsonl"):
            rec["data"] = dn
            rec["split"] = rec.get("split") or dn
            yield rec


def file_summaries(model_dir: Path, metrics: Mapping, decomposed: bool = False) -> dict[str, dict]:
    """Each scored data file's summary (data name -> summary.json's tables): metrics.json's copy, or,
    for a file scored before the tables a sweep reads existed, recomputed from its scores.jsonl read
    one line at a time. No model's records are ever held together."""
    from opgen.score.metrics import MetricDefs, Summary

    out = {}
    for dn, entry in metrics["data"].items():
        e = entry.get("decomposed") if decomposed else entry
        if not e or "scores" not in e:
            continue
        summary = e.get("summary") or {}
        if "interval" not in (summary.get("metric_definitions") or {}):
            defs = MetricDefs(drift_call=drift_call_of(metrics))
            summary = {**summary, **Summary.of(_scores_lines(model_dir / e["scores"] / "scores.jsonl"),
                                               defs).result(0, 0)}
        out[dn] = summary
    return out


def correct(rec: Mapping) -> bool:
    """Whether a scores record is a correct answer (accuracy 1); the sweep and the fit count these."""
    return float(rec.get("acc", 0.0)) >= 1.0


def _depths(table: Mapping) -> dict[str, Mapping]:
    """A by_depth table's rows of real depths (>= 0), keyed by the depth."""
    return {d: p for d, p in table.items() if d.isdigit()}


def sweep_row(name: str, model_dir: Path, metrics: Mapping) -> dict:
    """One model's line of the sweep: accuracy overall, by data file and by depth (95% intervals),
    the arity-error and chimera rates over recall blocks, truncations, decomposed accuracy — all
    added up from the data files' summaries (opgen.score.metrics.combine)."""
    from opgen.score.metrics import combine, combine_arity, interval_of

    files = file_summaries(model_dir, metrics)
    how = next((interval_of(s) for s in files.values()), "rows")
    row: dict = {"model": name, "step": checkpoint_step(name),
                 "overall": _proportion(combine((s.get("overall") for s in files.values()), how)),
                 "by_split": {}, "by_depth": {}}
    by_split: dict[str, list] = {}
    by_depth: dict[str, list] = {}
    for dn, s in files.items():
        for split, p in (s.get("by_split") or {}).items():
            by_split.setdefault(split or dn, []).append(p)
        for d, p in _depths(s.get("by_depth") or {}).items():
            by_depth.setdefault(d, []).append(p)
    row["by_split"] = {k: _proportion(combine(v, how)) for k, v in sorted(by_split.items())}
    row["by_depth"] = {k: _proportion(combine(v, how)) for k, v in sorted(by_depth.items(), key=lambda kv: int(kv[0]))}
    # Depth columns per data file: depth 4 of held-out trees and depth 4 of train-operator chains
    # are different quantities, so pooled depth columns exist only when one data file was scored.
    row["by_data_depth"] = {dn: {d: _proportion(combine([p], how)) for d, p in
                                 sorted(_depths(s.get("by_depth") or {}).items(), key=lambda kv: int(kv[0]))}
                            for dn, s in sorted(files.items()) if _depths(s.get("by_depth") or {})}
    if len([s for s in files.values() if (s.get("overall") or {}).get("n")]) > 1:
        row["by_depth"] = {}
    # Roll-ups by role: ID/OOD/total, the arity tables and rates come from eval files only; each
    # probe file reports per condition on its own (opgen.score.metrics.file_role).
    roles = data_roles(metrics)
    evals = {dn: s for dn, s in files.items() if roles.get(dn, "eval") == "eval"}
    row["roles"] = {dn: roles[dn] for dn in sorted(roles)}
    row["scope"] = {}
    for k in ("id", "ood", "total"):
        cells = {dn: (s.get("by_scope") or {}).get(k) for dn, s in sorted(evals.items())}
        row["scope"][k] = {**_proportion(combine(cells.values(), how)),
                           "files": {dn: p["n"] for dn, p in cells.items() if p and p.get("n")}}
    row["non_degenerate"] = _proportion(combine((s.get("non_degenerate") for s in evals.values()), how))
    row["metric_definitions"] = {"drift_call": drift_call_of(metrics)}
    row["arity_by_distance"] = combine_arity((s.get("arity_by_distance") for s in evals.values()), how)
    row.update(arity_rates(evals.values()))
    row["probes"] = {}
    for dn in sorted(d for d, role in roles.items() if role == "probe" and d in files):
        s = files[dn]
        conds: dict[str, list] = {}
        for c, p in (s.get("by_condition") or {}).items():
            conds.setdefault("" if c == "None" else c, []).append(p)
        row["probes"][dn] = {"rows": (s.get("overall") or {}).get("n", 0),
                             "by_condition": {c: _proportion(combine(v, how)) for c, v in sorted(conds.items())},
                             "arity_by_distance": combine_arity([s.get("arity_by_distance")], how),
                             **arity_rates([s])}
    row["sources"] = {"scope": row["scope"]["total"]["files"],
                      "arity": {dn: n for dn, s in sorted(evals.items()) if (n := _blocks(s))}}
    # Program responses that fail only for want of the native module's imports (opgen score
    # --namespace native runs them with those names): a large share means the wrong namespace.
    programs = sum((s.get("missing_import") or {}).get("programs", 0) for s in files.values())
    missing = sum((s.get("missing_import") or {}).get("responses", 0) for s in files.values())
    row["missing_import_rate"] = missing / programs if programs else None
    samples = sum(e["generation"]["samples"] for e in metrics["data"].values())
    cut = sum(e["generation"]["truncated_samples"] for e in metrics["data"].values())
    row["truncated_rate"] = cut / samples if samples else None
    dec = file_summaries(model_dir, metrics, decomposed=True)
    row["decomposed"] = _proportion(combine((s.get("overall") for s in dec.values()), how)) if dec else None
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


def _blocks(summary: Mapping) -> int:
    """Recall blocks written in a file (every operator's)."""
    return sum(int(d.get("written") or 0) for d in (summary.get("recall_by_op") or {}).values())


def arity_rates(summaries: Iterable[Mapping]) -> dict:
    """The study's arity error (func_24's recall blocks written without a parameter) and, under
    their own names, the rates over every operator's blocks (dropped, added, chimera), with the
    block counts behind each; from the files' ``recall_by_op``."""
    written = dropped = added = chimera = f24 = f24_dropped = 0
    for s in summaries:
        for op, d in (s.get("recall_by_op") or {}).items():
            w = int(d.get("written") or 0)
            drop = int(d.get("arity_dropped", d.get("arity")) or 0)
            written += w
            dropped += drop
            added += int(d.get("arity_added") or 0)
            chimera += int(d.get("chimera") or 0)
            if op == STUDY_ARITY_OP:
                f24 += w
                f24_dropped += drop

    def rate(k: int, n: int) -> float | None:
        return k / n if n else None

    return {"recall_blocks": written, "arity_error_rate": rate(f24_dropped, f24), "func_24_blocks": f24,
            "arity_error_rate_all_ops": rate(dropped, written), "arity_added_rate_all_ops": rate(added, written),
            "chimera_rate": rate(chimera, written)}


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
    for k in ("arity_error_rate", "arity_error_rate_all_ops", "arity_added_rate_all_ops", "chimera_rate",
              "missing_import_rate", "truncated_rate"):
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
