"""Score a parquet file against a responses JSONL: ``scores.jsonl``, ``summary.json``, ``summary.csv``, plots.

Every response is graded (none skipped silently): malformed lines, unknown or duplicated indices
are errors naming the line; rows without a response are counted in the summary.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from opgen.score import metrics as M
from opgen.score.grade import ERRORS, GroundTruthError, grade
from opgen.score.sandbox import Sandbox


class ScoreInputError(ValueError):
    """An input file the scorer cannot use; the message names the file and the line, row or field."""


@dataclass(frozen=True)
class Row:
    position: int
    ground_truth: str
    data_source: str
    extra: dict


def read_rows(path: Path) -> list[Row]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise ScoreInputError(f"{path}: not a readable parquet file ({exc})") from None
    missing = [c for c in ("reward_model",) if c not in table.column_names]
    if missing:
        raise ScoreInputError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(table.column_names)})")
    rm = table.column("reward_model").to_pylist()
    ds = table.column("data_source").to_pylist() if "data_source" in table.column_names else [""] * len(rm)
    ex = table.column("extra_info").to_pylist() if "extra_info" in table.column_names else [{}] * len(rm)
    rows = []
    for i, (r, d, e) in enumerate(zip(rm, ds, ex)):
        if not isinstance(r, dict) or not isinstance(r.get("ground_truth"), str):
            raise ScoreInputError(f"{path}: row {i}: reward_model.ground_truth is missing or not a string")
        rows.append(Row(i, r["ground_truth"], d or "", e or {}))
    return rows


def read_responses(path: Path, n_rows: int) -> dict[int, list[str]]:
    """``{row index: [response, ...]}`` from a JSONL of ``{"index", "response" | "responses"}`` lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScoreInputError(f"{path}: cannot read ({exc})") from None
    out: dict[int, list[str]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ScoreInputError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ScoreInputError(f"{where}: expected an object, got {type(obj).__name__}")
        index = obj.get("index")
        if type(index) is not int:
            raise ScoreInputError(f"{where}: 'index' must be an integer, got {index!r}")
        if not 0 <= index < n_rows:
            raise ScoreInputError(f"{where}: index {index} does not exist (the data has {n_rows} rows)")
        if index in out:
            raise ScoreInputError(f"{where}: duplicate index {index}")
        if "responses" in obj:
            got = obj["responses"]
            if not isinstance(got, list) or not got or not all(isinstance(s, str) for s in got):
                raise ScoreInputError(f"{where}: 'responses' must be a non-empty list of strings")
        elif isinstance(obj.get("response"), str):
            got = [obj["response"]]
        else:
            raise ScoreInputError(f"{where}: needs 'response' (a string) or 'responses' (a list of strings)")
        out[index] = got
    return out


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


_MEASURES = ("split", "family", "depth", "k", "condition", "structure", "answer_format", "target_op")


def _jobs(rows: list[Row], responses: dict[int, list[str]]) -> Iterator[tuple[Row, int, str]]:
    for index in sorted(responses):
        for sample, text in enumerate(responses[index]):
            yield rows[index], sample, text


def score_files(data: Path, responses: Path, out: Path, mode: str = "auto", workers: int = 2,
                policy: str = "output", group: str = "fraction", sandbox: Sandbox | None = None,
                timeout_s: float = 2.0, plots: bool = True, static: bool = True) -> dict:
    """Grade every response, write the report into ``out``, return the summary. ``static=False``
    runs every program in the sandbox (see grade())."""
    data, responses, out = Path(data), Path(responses), Path(out)
    rows = read_rows(data)
    answers = read_responses(responses, len(rows))
    for index in sorted(answers):
        try:
            from opgen.score.grade import load_truth

            load_truth(rows[index].ground_truth)
        except GroundTruthError as exc:
            raise ScoreInputError(f"{data}: row {index}: {exc}") from None
    own = sandbox is None
    box = sandbox or Sandbox(workers=workers, timeout_s=timeout_s)
    try:
        def one(job: tuple[Row, int, str]) -> dict:
            row, sample, text = job
            g = grade(row.ground_truth, text, policy=policy, group=group, mode=mode, sandbox=box, static=static,
                      answer_format=str(row.extra.get("answer_format", "") or ""),
                      assistant_prefix=str(row.extra.get("assistant_prefix", "") or ""))
            rec = {"index": row.position, "sample": sample}
            rec.update({k: row.extra.get(k, "") for k in _MEASURES})
            rec["data_source"] = row.data_source
            rec.update(g)
            return rec

        with ThreadPoolExecutor(max(1, box.workers * 2)) as pool:
            records = list(pool.map(one, _jobs(rows, answers)))
        level = box.level
    finally:
        if own:
            box.close()
    summary = summarize(records, n_rows=len(rows), answered=len(answers))
    summary.update({"data_path": str(data), "responses_path": str(responses), "mode": mode, "policy": policy,
                    "group": group, "isolation": level, "static": static})
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    _write_atomic(out / "scores.jsonl", lines.encode("utf-8"))
    summary["plots"] = write_plots(summary, out) if plots else []
    _write_atomic(out / "summary.csv", summary_csv(summary).encode("utf-8"))
    _write_atomic(out / "summary.json", (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return summary


def summarize(records: list[dict], n_rows: int, answered: int) -> dict:
    by_row: dict[int, list[bool]] = {}
    for r in records:
        by_row.setdefault(r["index"], []).append(r["acc"] >= 1.0)
    samples = [len(v) for v in by_row.values()]
    errors = Counter(r["error"] for r in records)
    structured = [r for r in records if r.get("structure_ok") is not None]
    summary = {
        "rows": n_rows, "rows_answered": answered, "rows_without_response": n_rows - answered,
        "responses": len(records),
        "samples_per_row": {"min": min(samples, default=0), "max": max(samples, default=0)},
        "overall": M.proportion(sum(r["acc"] >= 1.0 for r in records), len(records)),
        "mean_score": sum(r["score"] for r in records) / len(records) if records else 0.0,
        "format_ok": M.proportion(sum(bool(r["format_ok"]) for r in records), len(records)),
        "structure_ok": M.proportion(sum(bool(r["structure_ok"]) for r in structured), len(structured)),
        "by_split": M.grouped(records, "split"),
        "by_depth": M.grouped(records, "depth"),
        "by_k": M.grouped(records, "k"),
        "by_condition": M.grouped(records, "condition"),
        "by_split_depth": M.grouped(records, ("split", "depth")),
        "pass_at_k": M.pass_at_k_table(by_row) if max(samples, default=0) > 1 else {},
        "errors": {e: errors[e] for e in ERRORS if errors.get(e)},
    }
    summary.update(M.recall_tables(records))
    return summary


def summary_csv(summary: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "key", "n", "correct", "acc", "ci_low", "ci_high"])
    w.writerow(["overall", "all", *(summary["overall"][k] for k in ("n", "correct", "acc", "ci_low", "ci_high"))])
    for table in ("by_split", "by_depth", "by_k", "by_condition", "by_split_depth"):
        for key, p in summary[table].items():
            w.writerow([table[3:], key, p["n"], p["correct"], p["acc"], p["ci_low"], p["ci_high"]])
    for op, d in summary["recall_by_op"].items():
        w.writerow(["recall_op", op, d["needed"], d["correct"], d["acc"], d["ci_low"], d["ci_high"]])
    for op, d in summary["recall_by_op"].items():
        lo, hi = M.wilson(d["arity"], d["written"])
        w.writerow(["arity_rate", op, d["written"], d["arity"], d["arity_rate"], lo, hi])
    for k, v in summary["pass_at_k"].items():
        w.writerow(["pass_at_k", k, "", "", v, "", ""])
    for e, n in summary["errors"].items():
        w.writerow(["error", e or "correct", n, "", "", "", ""])
    return buf.getvalue()


def write_plots(summary: dict, out: Path) -> list[str]:
    """Accuracy vs depth per split (95% intervals) and the per-operator recall heatmap."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    series: dict[str, list[tuple[int, dict]]] = {}
    for key, p in summary["by_split_depth"].items():
        split, depth = key.split("|")
        if depth.lstrip("-").isdigit() and int(depth) >= 0:
            series.setdefault(split or "(none)", []).append((int(depth), p))
    for split, pts in sorted(series.items()):
        pts.sort(key=lambda t: t[0])
        xs = [d for d, _ in pts]
        ys = [p["acc"] for _, p in pts]
        err = [[p["acc"] - p["ci_low"] for _, p in pts], [p["ci_high"] - p["acc"] for _, p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=split)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("depth")
    ax.set_ylabel("accuracy (95% Wilson)")
    ax.set_ylim(-0.02, 1.02)
    if series:
        ax.legend(fontsize="small")
    fig.tight_layout()
    _save(fig, out / "accuracy_vs_depth.png")
    plt.close(fig)
    written.append("accuracy_vs_depth.png")

    recall = summary["recall_by_op"]
    cols = ("correct", "chimera", "arity", "wrong_body", "missing")
    fig, ax = plt.subplots(figsize=(6, max(2.0, 0.3 * len(recall) + 1)))
    matrix = [[recall[op][c] / recall[op]["needed"] if recall[op]["needed"] else 0.0 for c in cols] for op in recall]
    if matrix:
        im = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        fig.colorbar(im, ax=ax, label="fraction of needed recalls")
    ax.set_xticks(range(len(cols)), cols, rotation=30)
    ax.set_yticks(range(len(recall)), list(recall))
    ax.set_title("recall outcome per operator")
    fig.tight_layout()
    _save(fig, out / "recall_heatmap.png")
    plt.close(fig)
    written.append("recall_heatmap.png")
    return written


def _save(fig: object, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp.png")
    # No timestamps in the PNG, so equal inputs give equal files.
    fig.savefig(tmp, dpi=100, metadata={"Software": None})
    os.replace(tmp, path)
