"""Score a parquet file against a responses JSONL: ``scores.jsonl``, ``summary.json``, ``summary.csv``, plots.

Every response is graded (none skipped silently): malformed lines, unknown or duplicated indices
are errors naming the line; rows without a response are counted in the summary.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opgen.errors import OpgenError
from opgen.library import LibraryMismatch, OperatorLibrary
from opgen.score import metrics as M
from opgen.score.batch import Item, grade_many
from opgen.score.judge import ERRORS, GroundTruthError
from opgen.score.sandbox import Sandbox
from opgen.score.settings import DEFAULT, GradeSettings


class ScoreInputError(ValueError, OpgenError):
    """An input file the scorer cannot use; the message names the file and the line, row or field."""

    exit_code = 1


@dataclass(frozen=True)
class Row:
    position: int
    ground_truth: str
    data_source: str
    extra: dict


def read_rows(path: Path) -> list[Row]:
    import pyarrow.parquet as pq

    try:  # ParquetFile, not pq.read_table: that imports pyarrow.dataset (~0.3 s of start-up)
        table = pq.ParquetFile(path).read()
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
    return parse_responses(text, n_rows, path)


def parse_responses(text: str, n_rows: int, source: object) -> dict[int, list[str]]:
    """`read_responses` of JSONL text already read; errors name ``source`` and the line. Lines end
    at ``\n`` only: a response may hold U+2028, U+0085 ... unescaped (JSON allows them), and
    ``str.splitlines`` would cut its line there."""
    out: dict[int, list[str]] = {}
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
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
        if "responses" in obj and "response" in obj:  # which one was meant? never one of them silently
            raise ScoreInputError(f"{where}: both 'response' and 'responses'; give one of them")
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


def check_truths(data: Path | str, rows: Sequence[Row] | Mapping[int, Row], answers: dict[int, list[str]],
                 settings: GradeSettings = DEFAULT) -> GradeSettings:
    """Every answered row's ground truth must be readable and name one operator library, given
    (``settings.library``, when not the study's) or found by its digest (the study's, the user's
    store), before anything is graded: ``settings`` with that library. A malformed ground truth is
    a :class:`ScoreInputError`, a library that cannot be had :class:`opgen.library.UnknownLibrary`
    or :class:`opgen.library.LibraryMismatch`, each naming the row."""
    record: GradeSettings | None = None
    for index in sorted(answers):
        where = f"{data}: row {index}: " if str(data) else f"row {index}: "
        try:
            row_record = settings.for_row(rows[index].ground_truth, where)
        except GroundTruthError as exc:
            raise ScoreInputError(f"{where}{exc}") from None
        if record is None:
            record = row_record
        elif row_record.library.digest != record.library.digest:
            raise LibraryMismatch(f"{where}names operator library {row_record.library.name!r} (digest "
                                  f"{row_record.library.digest[:12]}), another than the rows before it "
                                  f"({record.library.name!r}, digest {record.library.digest[:12]}); one file, "
                                  "one library")
    return settings if record is None else record


def _json_escape(err: UnicodeError) -> tuple[str, int]:
    # A lone surrogate (a model's exception message can hold one) is written as its JSON escape
    # ``\udXXX``: the file stays valid UTF-8 and valid JSON, and reads back as the same string.
    # JSON's own syntax is ASCII, so the character can only be inside a string literal.
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(f"\\u{ord(c):04x}" for c in err.object[err.start:err.end]), err.end


codecs.register_error("opgen-json-escape", _json_escape)


def encode_json_text(text: str) -> bytes:
    """UTF-8 of JSON text; characters UTF-8 cannot hold (lone surrogates) as JSON escapes."""
    return text.encode("utf-8", "opgen-json-escape")


def _write_atomic(path: Path, data: bytes) -> None:
    from opgen import files

    files.atomic_write_bytes(path, data)


_MEASURES = ("split", "family", "depth", "k", "condition", "structure", "answer_format", "target_op", "ops")


def _jobs(rows: Sequence[Row] | Mapping[int, Row], responses: dict[int, list[str]]) -> Iterator[tuple[Row, int, str]]:
    for index in sorted(responses):
        for sample, text in enumerate(responses[index]):
            yield rows[index], sample, text


def grade_records(rows: Sequence[Row] | Mapping[int, Row], answers: dict[int, list[str]], box: Sandbox, *,
                  settings: GradeSettings = DEFAULT, processes: int | None = None,
                  graded: Callable[[], object] | None = None) -> list[dict]:
    """One record per response (row order, then sample order), graded with ``settings`` concurrently in ``box``
    (the static path's share on ``processes`` grading processes: :func:`opgen.score.batch.grade_many`):
    the lines of ``scores.jsonl``, and what :func:`summarize` reads. ``rows`` is indexed by row
    index: all of a file's rows, or (a mapping) those of ``answers`` only. ``graded()`` is called
    once per response as its grade comes in (from grading threads: a progress bar's update)."""
    jobs = list(_jobs(rows, answers))
    items = [Item.of_row(row.ground_truth, text, row.extra) for row, _, text in jobs]

    def answered(i: int, g: dict) -> dict:
        if graded is not None:
            graded()
        return g

    grades: list[dict] = grade_many(items, sandbox=box, settings=settings, processes=processes, answered=answered)
    records = []
    parsed: dict[int, tuple[str, ...] | None] = {}
    for (row, sample, _), g in zip(jobs, grades):
        rec: dict[str, object] = {"index": row.position, "sample": sample}
        rec.update({k: row.extra.get(k, "") for k in _MEASURES})
        if rec["ops"]:
            rec["scope_from"] = "extra_info.ops"
        else:  # foreign and native files: the operators their programs call (parsed, never run)
            if row.position not in parsed:
                parsed[row.position] = M.program_ops(row.ground_truth)
            found = parsed[row.position]
            rec["ops"] = list(found) if found else ""
            rec["scope_from"] = "program" if found else None
        rec["scope"] = M.scope_of(rec["ops"], settings.library)
        rec.update(M.row_measures(row.extra))
        rec["data_source"] = row.data_source
        rec.update(g)
        records.append(rec)
    return records


# seconds a response's program may run (opgen score --timeout's default, and opgen eval's)
TIMEOUT_S = 2.0


def score_files(data: Path, responses: Path, out: Path, mode: str = "auto", workers: int = 2,
                policy: str = "output", group: str = "fraction", sandbox: Sandbox | None = None,
                timeout_s: float = TIMEOUT_S, plots: bool = True, namespace: str = "strict",
                distance_edges: tuple[int, ...] = M.DISTANCE_EDGES, static: bool = True,
                only: Collection[int] | None = None, processes: int | None = None,
                metric_defs: M.MetricDefs = M.DEFAULT_DEFS, settings: GradeSettings | None = None,
                progress: bool = False, library: OperatorLibrary | str | None = None) -> dict:
    """Grade every response (or those of rows ``only``), write the report into ``out``, return the
    summary. ``static=False`` runs every program in the sandbox (see grade()); ``processes``: grading
    processes for the static path's share (:func:`opgen.score.batch.grade_many`; default
    ``OPGEN_GRADE_PROCESSES``, else one per CPU). ``settings``: the grading options (mode, policy,
    group, namespace, static) as one :class:`GradeSettings` instead of the loose keywords;
    ``progress``: a bar of responses graded on stderr. ``library``: the operator library the rows
    were built from (an ``OperatorLibrary`` or a spec); by default the one the rows name, from the
    user's library store. A row naming another one, or one neither given nor registered, is refused
    before anything is graded (:func:`check_truths`)."""
    record = GradeSettings.resolve(settings, mode=mode, policy=policy, group=group, namespace=namespace,
                                   static=static, library=library)
    data, responses, out = Path(data), Path(responses), Path(out)
    rows = read_rows(data)
    answers = read_responses(responses, len(rows))
    if only is not None:
        answers = {i: a for i, a in answers.items() if i in only}
    record = check_truths(data, rows, answers, record)
    if plots:  # matplotlib's import (seconds) overlaps the grading, which mostly waits here
        threading.Thread(target=_import_plotting, name="opgen-import-matplotlib", daemon=True).start()
    own = sandbox is None
    box = sandbox or Sandbox(workers=workers, timeout_s=timeout_s)
    bar = None
    if progress:  # tqdm only when asked for (its import costs start-up)
        from tqdm import tqdm

        bar = tqdm(total=sum(len(a) for a in answers.values()), desc="score", unit="response", file=sys.stderr,
                   leave=False)
    try:
        records = grade_records(rows, answers, box, settings=record, processes=processes,
                                graded=None if bar is None else functools.partial(bar.update, 1))
        level = box.level
    finally:
        if bar is not None:
            bar.close()
        if own:
            box.close()
    return write_records_report(out, records, n_rows=len(rows), answered=len(answers), data=data,
                                responses=responses, isolation=level, settings=record, plots=plots,
                                distance_edges=distance_edges, metric_defs=metric_defs)


def write_records_report(out: Path, records: list[dict], *, n_rows: int, answered: int, data: Path,
                         responses: Path, isolation: str, settings: GradeSettings = DEFAULT,
                         plots: bool = True, distance_edges: tuple[int, ...] = M.DISTANCE_EDGES,
                         metric_defs: M.MetricDefs = M.DEFAULT_DEFS) -> dict:
    """The report of graded ``records`` (`grade_records`'s, in row then sample order) into ``out``:
    ``scores.jsonl``, ``summary.csv``, plots, ``summary.json`` (last); returns the summary. What
    `score_files` writes once it has graded; `opgen eval --executor ray` grades chunk by chunk
    and writes a pass's report with it once the pass's records are in."""
    summary = summarize(records, n_rows=n_rows, answered=answered, distance_edges=distance_edges, defs=metric_defs)
    summary.update({"data_path": str(data), "responses_path": str(responses), **settings_fields(settings, isolation)})
    summary["role"] = M.file_role(data, records)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    _write_report(Path(out), lines, summary, plots)
    return summary


def settings_fields(settings: GradeSettings, isolation: str) -> dict:
    """The summary's fields that say how it was graded, in the summary's order."""
    out = {"mode": settings.mode, "policy": settings.policy, "group": settings.group,
           "namespace": settings.namespace, "isolation": isolation, "static": settings.static}
    if not settings.library.is_study:  # a user library (the study's summaries stay as they were)
        out["library"] = {"name": settings.library.name, "digest": settings.library.digest}
    return out


PLOTS = ("accuracy_vs_depth.png", "recall_heatmap.png")
PLOTS_EXTRA = "plots"  # the pyproject extra that installs matplotlib


def plots_missing(complete: str) -> str:
    """The one line said when plots are skipped for want of matplotlib; ``complete``: what was written."""
    return f"plots skipped: matplotlib is not installed (pip install 'opgen[{PLOTS_EXTRA}]'); {complete} are complete"


PLOTS_MISSING = plots_missing("scores.jsonl, summary.json and summary.csv")
REPORT_FILES = ("scores.jsonl", "summary.csv", "summary.json", *PLOTS)


class ScoreOutputError(ScoreInputError):
    """The report could not be written (a full disk, a read-only folder); none of it is left behind."""


def _write_report(out: Path, lines: str, summary: dict, plots: bool) -> None:
    """The whole report staged beside ``out`` and swapped in at once (opgen.outdir.committed): a
    rescore replaces the whole report (old plots included) or, killed or failing, leaves the old
    one as it was; ``summary.json`` is written last. ``out`` is locked while it is written and
    refused if it holds files a report does not."""
    from opgen import outdir
    from opgen.files import describe_os_error

    try:
        with outdir.committed(out, REPORT_FILES.__contains__, "opgen score", "summary.json") as stage:
            _write_atomic(stage / "scores.jsonl", encode_json_text(lines))
            summary["plots"] = write_plots(summary, stage) if plots else []
            if plots and not _matplotlib():
                summary["plots_skipped"] = PLOTS_MISSING
            _write_atomic(stage / "summary.csv", summary_csv(summary).encode("utf-8", "backslashreplace"))
            _write_atomic(stage / "summary.json",
                          encode_json_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n"))
    except outdir.OutputError as exc:
        raise ScoreOutputError(f"cannot write the report: {exc}") from None
    except OSError as exc:
        raise ScoreOutputError(f"cannot write the report into {out}: {describe_os_error(exc)}; "
                               f"the folder was left as it was") from None


def summarize(records: list[dict], n_rows: int, answered: int,
              distance_edges: tuple[int, ...] = M.DISTANCE_EDGES, defs: M.MetricDefs = M.DEFAULT_DEFS) -> dict:
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
        "by_scope": M.scope_table(records),
        # rows where no call leaves its argument unchanged and the output is not the input
        "non_degenerate": M.proportion(sum(r["acc"] >= 1.0 for r in records if r.get("degenerate") is False),
                                       sum(1 for r in records if r.get("degenerate") is False)),
        "degenerate_rows": sum(1 for r in records if r.get("degenerate") is True),
        # the weaker condition: only rows whose output is their input excluded (return x scores there)
        "output_changed": M.proportion(sum(r["acc"] >= 1.0 for r in records if r.get("output_is_input") is False),
                                       sum(1 for r in records if r.get("output_is_input") is False)),
        "distance_edges": list(distance_edges),
        "metric_definitions": defs.describe(),
        "arity_by_distance": M.arity_by_distance(records, distance_edges, defs.drift_call),
        "arity_by_tail_calls": M.arity_by_tail_calls(records, defs.drift_call),
        "pass_at_k": M.pass_at_k_table(by_row, defs.pass_k) if max(samples, default=0) > 1 else {},
        "errors": {e: errors[e] for e in ERRORS if errors.get(e)},
        # responses graded again after the grading process or sandbox worker under them died (grades' ``retries``)
        "retries": sum(r.get("retries", 0) for r in records),
    }
    summary["role"] = M.file_role(None, records)  # from the rows; write_records_report adds the manifest's
    summary["scope_from"] = dict(sorted(Counter(str(r.get("scope_from")) for r in records).items()))
    summary.update(M.recall_tables(records))
    summary["missing_import"] = missing_import_counts(records)
    return summary


# ``opgen score``/``opgen eval`` warn when more than this share of program responses fail only for
# want of the native module's imports (``gcd``): then ``--namespace native`` is what was meant.
MISSING_IMPORT_WARN_RATE = 0.05


def missing_import_counts(records: list[dict]) -> dict:
    """Program responses whose error is ``missing_import``, and recall blocks with that verdict."""
    programs = [r for r in records if r.get("mode") == "program"]
    n = sum(r.get("error") == "missing_import" for r in programs)
    blocks = sum(rc.get("verdict") == "missing_import" for r in records for rc in (r.get("recalls") or ()))
    return {"programs": len(programs), "responses": n, "rate": n / len(programs) if programs else 0.0,
            "recall_blocks": blocks}


def missing_import_warning(summary: dict) -> str | None:
    """The warning line to print when ``missing_import`` is frequent, else None."""
    mi = summary.get("missing_import") or {}
    if summary.get("namespace", "strict") != "strict" or mi.get("rate", 0.0) <= MISSING_IMPORT_WARN_RATE:
        return None
    from opgen.score.diagnose import native_imports

    names = ", ".join(f"from {m} import {n}" for m, n in native_imports())
    return (f"warning: {mi['responses']} of {mi['programs']} programs ({mi['rate']:.1%}) fail only for want of "
            f"the native module's imports ({names}); the native benchmark shows its definitions without them. "
            f"Grade with --namespace native to run programs with those names in scope.")


def summary_csv(summary: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "key", "n", "correct", "acc", "ci_low", "ci_high"])
    w.writerow(["overall", "all", *(summary["overall"][k] for k in ("n", "correct", "acc", "ci_low", "ci_high"))])
    for table in ("non_degenerate", "output_changed"):
        if table in summary:
            w.writerow([table, "all", *(summary[table][k] for k in ("n", "correct", "acc", "ci_low", "ci_high"))])
    for table in ("by_split", "by_depth", "by_k", "by_condition", "by_split_depth", "by_scope"):
        for key, p in summary[table].items():
            w.writerow([table[3:], key, p["n"], p["correct"], p["acc"], p["ci_low"], p["ci_high"]])
    for op, d in summary["recall_by_op"].items():
        w.writerow(["recall_op", op, d["needed"], d["correct"], d["acc"], d["ci_low"], d["ci_high"]])
    for op, d in summary["recall_by_op"].items():
        lo, hi = M.wilson(d["arity"], d["written"])
        w.writerow(["arity_rate", op, d["written"], d["arity"], d["arity_rate"], lo, hi])
    for op, buckets in summary.get("arity_by_distance", {}).items():
        for b, d in buckets.items():
            w.writerow(["arity_by_distance", f"{op}|{b}", d["written"], d["arity"], d["rate"], d["ci_low"],
                        d["ci_high"]])
    for op, buckets in summary.get("arity_by_tail_calls", {}).items():
        for t, d in buckets.items():
            w.writerow(["arity_by_tail_calls", f"{op}|{t}", d["written"], d["arity"], d["rate"], d["ci_low"],
                        d["ci_high"]])
    for k, v in summary["pass_at_k"].items():
        w.writerow(["pass_at_k", k, "", "", v, "", ""])
    for e, n in summary["errors"].items():
        w.writerow(["error", e or "correct", n, "", "", "", ""])
    return buf.getvalue()


def _import_plotting() -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
    except Exception:  # write_plots says what is missing, when it runs
        pass


def _matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401 - only to learn whether the plots can be drawn
    except ImportError:
        return False
    return True


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


def _save(fig: Any, path: Path) -> None:  # a matplotlib Figure (matplotlib is imported lazily)
    buf = io.BytesIO()
    # No timestamps in the PNG, so equal inputs give equal files.
    fig.savefig(buf, dpi=100, format="png", metadata={"Software": None})
    _write_atomic(path, buf.getvalue())
