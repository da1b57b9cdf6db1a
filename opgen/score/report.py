"""Score a parquet file against a responses JSONL: ``scores.jsonl``, ``summary.json``, ``summary.csv``, plots.

As a stream: the rows and responses are read in chunks (:mod:`opgen.score.inputs`), each chunk is
graded on the grading processes while the one before it is written (:func:`graded`), each row's
records go to ``scores.jsonl`` inside the staged report as they come, and every roll-up is a
running counter (:class:`opgen.score.metrics.Summary`). The scorer's memory does not grow with
the number of responses; its output is the same whatever the chunk size.

Every response is graded (none skipped silently): malformed lines, unknown or duplicated indices
are errors naming the line, found before anything is graded; rows without a response are counted
in the summary. ``--out`` is checked (and locked) before grading too, and written only by the
final swap: an interrupted or failing run leaves it as it was.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import json
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from opgen import faults, outdir
from opgen.errors import OpgenError
from opgen.library import STUDY, OperatorLibrary
from opgen.score import inputs, metrics
from opgen.score.batch import Item, grade_many
from opgen.score.diagnose import native_imports
from opgen.score.inputs import Row
from opgen.score.judge import ROW_FIELDS
from opgen.score.sandbox import Sandbox
from opgen.score.settings import DEFAULT, GradeSettings

# Responses per grade_many call (a row's samples are never split between two); two calls are in
# flight at a time, so the grading processes never wait for this process to write a chunk.
CHUNK = 2048
IN_FLIGHT = 2


class ScoreOutputError(RuntimeError, OpgenError):
    """The report could not be written (a mount point, a read-only folder, a full disk); none of it
    is left behind."""

    exit_code = 1


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
# every extra_info field a record is made of (the row's fields, its measures, what grading reads):
# the only ones read from the data file
EXTRA_FIELDS = tuple(dict.fromkeys((*_MEASURES, *metrics.MEASURED_FIELDS, *ROW_FIELDS)))
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(record, ensure_ascii=False)


def row_fields(row: Row, library: OperatorLibrary = STUDY) -> dict[str, Any]:
    """What every record of a row carries before its grade: the row's measures, the operators it
    calls and their scope, its degeneracy and calls (``metrics.row_measures``), its data source."""
    rec: dict[str, Any] = {k: row.extra.get(k, "") for k in _MEASURES}
    if rec["ops"]:
        rec["scope_from"] = "extra_info.ops"
    else:  # foreign and native files: the operators their programs call (parsed, never run)
        found = metrics.program_ops(row.ground_truth)
        rec["ops"] = list(found) if found else ""
        rec["scope_from"] = "program" if found else None
    rec["scope"] = metrics.scope_of(rec["ops"], library)
    rec.update(metrics.row_measures(row.extra))
    rec["data_source"] = row.data_source
    return rec


def records_of(row: Row, grades: list[dict], library: OperatorLibrary = STUDY) -> list[dict]:
    """The ``scores.jsonl`` records of a row's grades, in sample order."""
    fields = row_fields(row, library)
    return [{"index": row.position, "sample": sample, **fields, **g} for sample, g in enumerate(grades)]


def graded(pairs: Iterable[tuple[Row, list[str]]], box: Sandbox | None, *, data: Path,
           settings: GradeSettings = DEFAULT, processes: int | None = None, chunk: int | None = None,
           answered: Callable[[], object] | None = None) -> Iterator[tuple[Row, list[dict]]]:
    """(row, its grades) for every (row, responses) of ``pairs``, in their order: graded with
    ``settings`` in ``box`` (the static path's share on ``processes`` grading processes,
    :func:`opgen.score.batch.grade_many`), ``chunk`` responses per call, :data:`IN_FLIGHT` calls at
    a time. Each chunk's ground truths are checked (readable, of ``settings.library``: the rows'
    library, :func:`opgen.score.inputs.check_libraries`) before it is graded. ``answered()`` is
    called once per response as its grade comes in (from grading threads: a progress bar's update)."""
    def one(i: int, g: dict) -> dict:
        if answered is not None:
            answered()
        return g

    def grade(part: list[tuple[Row, list[str]]]) -> list[dict]:
        items = [Item.of_row(row.ground_truth, text, row.extra) for row, texts in part for text in texts]
        return grade_many(items, sandbox=box, settings=settings, processes=processes, answered=one)

    chunk = CHUNK if chunk is None else chunk
    pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="opgen-grade")
    flight: deque[tuple[list[tuple[Row, list[str]]], Future]] = deque()
    try:
        for part in _parts(pairs, chunk):
            inputs.check_truths(data, ((row.position, row.ground_truth) for row, _ in part), settings)
            flight.append((part, pool.submit(grade, part)))
            if len(flight) > IN_FLIGHT:
                yield from _split(*flight.popleft())
        while flight:
            yield from _split(*flight.popleft())
    finally:
        for _, fut in flight:
            fut.cancel()
        pool.shutdown(wait=True)


def _parts(pairs: Iterable[tuple[Row, list[str]]], chunk: int) -> Iterator[list[tuple[Row, list[str]]]]:
    part: list[tuple[Row, list[str]]] = []
    size = 0
    for row, texts in pairs:
        if part and size + len(texts) > chunk:
            yield part
            part, size = [], 0
        part.append((row, texts))
        size += len(texts)
    if part:
        yield part


def _split(part: list[tuple[Row, list[str]]], fut: Future) -> Iterator[tuple[Row, list[dict]]]:
    grades = fut.result()
    k = 0
    for row, texts in part:
        yield row, grades[k:k + len(texts)]
        k += len(texts)


def _joined(rows: Iterator[Row], answers: Iterable[inputs.Answer], responses: inputs.Responses) -> \
        Iterator[tuple[Row, list[str]]]:
    for answer in answers:
        row = next(rows, None)
        if row is None or row.position != answer.index:
            raise responses.changed()
        yield row, answer.samples


class Report:
    """One report being made: rows' grades in (:meth:`add`, any row order), their ``scores.jsonl``
    lines out, every roll-up a running counter; :meth:`finish` writes the rest into a staging folder."""

    def __init__(self, settings: GradeSettings = DEFAULT, metric_defs: metrics.MetricDefs = metrics.DEFAULT_DEFS,
                 distance_edges: tuple[int, ...] = metrics.DISTANCE_EDGES):
        self.settings = settings
        self.summary = metrics.Summary(metric_defs, distance_edges)

    def records(self, row: Row, grades: list[dict]) -> list[dict]:
        """The row's records, counted."""
        recs = records_of(row, grades, self.settings.library)
        self.summary.add_row(recs)
        return recs

    def add(self, row: Row, grades: list[dict]) -> bytes:
        """The row's records as ``scores.jsonl`` lines, counted."""
        return encode_json_text("".join(_ENCODE(r) + "\n" for r in self.records(row, grades)))

    def result(self, *, n_rows: int, answered: int, data: Path, responses: Path, isolation: str) -> dict:
        summary = self.summary.result(n_rows, answered)
        summary.update({"data_path": str(data), "responses_path": str(responses),
                        **settings_fields(self.settings, isolation)})
        summary["role"] = metrics.file_role(data, self.summary.probe_rows)
        return summary

    def finish(self, stage: Path, *, plots: bool = True, **result: Any) -> dict:
        """``summary.csv``, the plots and ``summary.json`` (last) into ``stage``; returns the summary."""
        summary = self.result(**result)
        try:
            summary["plots"] = write_plots(summary, stage) if plots else []
            if plots and not _matplotlib():
                summary["plots_skipped"] = PLOTS_MISSING
            _write_atomic(stage / "summary.csv", summary_csv(summary).encode("utf-8", "backslashreplace"))
            _write_atomic(stage / "summary.json",
                          encode_json_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n"))
        except OSError as exc:
            raise _WriteFailed(exc) from None
        return summary


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """``out``'s report staged and swapped in whole (:func:`opgen.outdir.committed`): ``out`` checked
    (a mount point, a parent it cannot write, files a report does not hold) and locked on entry,
    before any grading; a failure or a signal leaves it as it was. Errors writing are
    :class:`ScoreOutputError`."""
    from opgen.files import describe_os_error

    out = Path(out)
    if out.is_dir() and not out.is_symlink() and not os.access(out, os.W_OK | os.X_OK):
        raise ScoreOutputError(f"cannot write the report: {out}: not writable (its old report could not be "
                               f"replaced); choose another --out")
    try:
        with outdir.committed(out, REPORT_FILES.__contains__, "opgen score", "summary.json") as stage:
            yield stage
    except outdir.OutputError as exc:
        raise ScoreOutputError(f"cannot write the report: {exc}") from None
    except _WriteFailed as exc:
        raise ScoreOutputError(f"cannot write the report into {out}: {describe_os_error(exc.error)}; "
                               f"the folder was left as it was") from None


class _WriteFailed(Exception):
    """An OSError writing the staged report (not reading the inputs)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class ScoresFile:
    """``scores.jsonl`` in a staging folder, written as it comes (its errors are the report's)."""

    def __init__(self, stage: Path):
        try:
            self.fh: IO[bytes] = open(stage / "scores.jsonl", "wb")
        except OSError as exc:
            raise _WriteFailed(exc) from None

    def write(self, data: bytes) -> None:
        try:
            self.fh.write(data)
        except OSError as exc:
            raise _WriteFailed(exc) from None

    def __enter__(self) -> ScoresFile:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.fh.close()
        except OSError as error:
            if exc[0] is None:
                raise _WriteFailed(error) from None


# seconds a response's program may run (opgen score --timeout's default, and opgen eval's)
TIMEOUT_S = 2.0


def score_files(data: Path, responses: Path, out: Path, mode: str = "auto", workers: int = 2,
                policy: str = "output", group: str = "fraction", sandbox: Sandbox | None = None,
                timeout_s: float = TIMEOUT_S, plots: bool = True, namespace: str = "strict",
                distance_edges: tuple[int, ...] = metrics.DISTANCE_EDGES, static: bool = True,
                only: Collection[int] | None = None, processes: int | None = None,
                metric_defs: metrics.MetricDefs = metrics.DEFAULT_DEFS, settings: GradeSettings | None = None,
                progress: bool = False, library: OperatorLibrary | str | None = None, chunk: int | None = None,
                check_prompts: bool = True) -> dict:
    """Grade every response (or those of rows ``only``), write the report into ``out``, return the
    summary. ``static=False`` runs every program in the sandbox (see grade()); ``processes``: grading
    processes for the static path's share (:func:`opgen.score.batch.grade_many`; default
    ``OPGEN_GRADE_PROCESSES``, else one per CPU). ``settings``: the grading options (mode, policy,
    group, namespace, static) as one :class:`GradeSettings` instead of the loose keywords;
    ``progress``: a bar of responses graded on stderr. ``library``: the operator library the rows
    were built from (an ``OperatorLibrary`` or a spec); by default the one the rows name, from the
    user's library store. A row naming another one, or one neither given nor registered, is refused
    before anything is graded (:func:`opgen.score.inputs.check_libraries`).
    ``chunk``: responses per grading call (default :data:`CHUNK`; the report is the same for any). ``check_prompts``: a
    line's ``prompt_sha256`` must be its row's (`opgen eval` turns it off for the generations it
    made from these very rows).

    Before anything is graded: every line of ``responses``, the rows' ground truths and library,
    the prompts' digests, and ``out`` (a file, a mount point, a folder it cannot write or that
    holds other files is refused)."""
    record = GradeSettings.resolve(settings, mode=mode, policy=policy, group=group, namespace=namespace,
                                   static=static, library=library)
    chunk = CHUNK if chunk is None else chunk
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk must be a whole number of responses >= 1, got {chunk!r}")
    data, responses, out = Path(data), Path(responses), Path(out)
    source = inputs.DataFile(data)
    answers = inputs.Responses(responses, source.n_rows, only)
    record = inputs.check_libraries(source, answers.wanted, record)  # with the rows' library
    if check_prompts:
        inputs.check_prompts(source, answers)
    report = Report(record, metric_defs, distance_edges)
    with staged(out) as stage:
        if plots:  # matplotlib's import (seconds) overlaps the grading, which mostly waits here
            threading.Thread(target=_import_plotting, name="opgen-import-matplotlib", daemon=True).start()
        own = sandbox is None
        box = sandbox or Sandbox(workers=workers, timeout_s=timeout_s)
        bar = None
        if progress:  # tqdm only when asked for (its import costs start-up)
            from tqdm import tqdm

            bar = tqdm(total=answers.samples, desc="score", unit="response", file=sys.stderr, leave=False)
        try:
            with ScoresFile(stage) as fh:
                pairs = _joined(source.rows(answers.wanted, EXTRA_FIELDS), answers, answers)
                for row, grades in graded(pairs, box, data=data, settings=record, processes=processes, chunk=chunk,
                                          answered=None if bar is None else _Tick(bar)):
                    fh.write(report.add(row, grades))
                    faults.signal_nth("scored-row", row.position)  # test-only: a run stopped mid-stream
            level = box.level
        finally:
            if bar is not None:
                bar.close()
            if own:
                box.close()
        return report.finish(stage, plots=plots, n_rows=source.n_rows, answered=answers.answered, data=data,
                             responses=responses, isolation=level)


class _Tick:
    def __init__(self, bar: Any):
        self.bar, self.lock = bar, threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.bar.update(1)


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


# ``opgen score``/``opgen eval`` warn when more than this share of program responses fail only for
# want of the native module's imports (``gcd``): then ``--namespace native`` is what was meant.
MISSING_IMPORT_WARN_RATE = 0.05


def missing_import_warning(summary: dict) -> str | None:
    """The warning line to print when ``missing_import`` is frequent, else None."""
    mi = summary.get("missing_import") or {}
    if summary.get("namespace", "strict") != "strict" or (mi.get("rate") or 0.0) <= MISSING_IMPORT_WARN_RATE:
        return None

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
        w.writerow(["arity_rate", op, d["written"], d["arity_dropped"], d["arity_rate"], *d["arity_ci"]])
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
