"""``opgen validate``: check parquet files against the row schemas and re-execute every ground truth.

opgen's own rows are checked in-process without running any stored code: each task's expression is
parsed with ``expr.parse`` (a closed grammar over the library) and evaluated, and the stored
``ref_code`` and gold answers must equal what the renderer makes of the parsed program. Rows from
elsewhere (native benchmark rows, any verl code-execution rows) carry arbitrary ``ref_code``; it
runs only through the scorer's sandbox (docs/contracts.md, "Sandbox API"), never in this process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq

from opgen import expr, formats, rows, truth
from opgen.library import STUDY, OperatorLibrary, library_of, library_of_rows, ref_of_truth
from opgen.outdir import listed_files
from opgen.resources import schema_path
from opgen.tasks import Item, Task

BATCH = 2048
MAX_LISTED = 20


@dataclass
class FileReport:
    path: str
    kind: str = ""  # rl | sft | foreign
    rows: int = 0
    failures: list[tuple[int, str]] = field(default_factory=list)
    n_failed: int = 0
    error: str = ""  # a file-level problem (unreadable, wrong schema)

    @property
    def ok(self) -> bool:
        return not self.error and self.n_failed == 0

    def fail(self, index: int, message: str) -> None:
        self.n_failed += 1
        if len(self.failures) < MAX_LISTED:
            self.failures.append((index, message))


@functools.cache
def _gt_validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_path(name).read_text()))


def _schema_problem(actual: pa.Schema, expected: pa.Schema) -> str:
    for f in expected:
        idx = actual.get_field_index(f.name)
        if idx < 0:
            return f"column {f.name!r} is missing"
        if not actual.field(idx).type.equals(f.type):
            return f"column {f.name!r} has type {actual.field(idx).type}, expected {f.type}"
    return ""


def kind_of(schema: pa.Schema) -> tuple[str, str]:
    """(kind, problem): ``rl``/``sft`` when the file has opgen's schema exactly, ``foreign`` when it
    has at least verl's minimal columns, else ("", why not)."""
    plain = pa.schema(list(schema))  # without key-value metadata
    for kind in ("sft", "rl"):
        if plain.equals(rows.schema(kind)):
            return kind, ""
    if schema.get_field_index("extra_info") >= 0 and "opgen_version" in str(schema.field("extra_info").type):
        kind = "sft" if schema.get_field_index("messages") >= 0 else "rl"
        return "", f"opgen {kind} row schema differs: " + (_schema_problem(plain, rows.schema(kind))
                                                            or "columns in another order or extra columns")
    problem = _schema_problem(plain, rows.verl_minimal_schema())
    return ("", problem) if problem else ("foreign", "")


# ---------------------------------------------------------------- opgen rows (trusted re-execution)


def _check_opgen_row(row: dict, kind: str, lib: OperatorLibrary = STUDY) -> str:
    """"" when the row is what opgen renders for its program (``lib``: the library of the file's
    rows), else the first problem. Nothing the row names is loaded: it must name ``lib``."""
    try:
        gt = truth.read(row["reward_model"]["ground_truth"], "reward_model.ground_truth")
    except truth.GroundTruthError as exc:
        return str(exc)
    except (TypeError, KeyError) as exc:
        return f"reward_model.ground_truth is missing ({exc})"
    try:
        ref = ref_of_truth(gt)
    except truth.GroundTruthError as exc:
        return str(exc)
    if (ref.digest if ref is not None else STUDY.digest) != lib.digest:
        return (f"ground_truth.library names library {ref or 'study'}, not the library of the file's first row "
                f"({lib.name!r}, digest {lib.digest[:12]})")
    tag = formats.library_member(gt["library"]) if ref is not None else ""
    try:
        return _check_parsed(row, gt, kind, lib, tag)
    except (KeyError, TypeError, IndexError, AttributeError):
        return _schema_message(gt) or "ground_truth does not have the contract's shape"


def _schema_message(gt: object) -> str:
    errors = sorted(_gt_validator("ground_truth.schema.json").iter_errors(gt), key=lambda e: list(e.path))
    if not errors:
        return ""
    path = ".".join(str(p) for p in errors[0].path) or "(top level)"
    return f"ground_truth.{path}: {errors[0].message}"


def _check_parsed(row: dict, gt: dict, kind: str, lib: OperatorLibrary = STUDY, tag: str = "") -> str:
    # The schema (schemas/ground_truth.schema.json) is consulted only to explain a mismatch: a
    # ground truth equal to the renderer's own is valid, and checking equality is ten times cheaper.
    extra = row["extra_info"]
    tasks = []
    for n, t in enumerate(gt["tasks"]):
        try:
            program = expr.parse(t["expr"], lib)
        except expr.ExprError as exc:
            return f"ground_truth.tasks[{n}].expr does not parse: {exc}"
        try:
            value = expr.evaluate(program, t["input"], None, lib)
        except Exception as exc:  # an operator failing is a broken row, reported, not a crash
            return f"ground_truth.tasks[{n}].expr fails on its input: {type(exc).__name__}: {exc}"
        if value != t["output"]:
            return (f"ground_truth.tasks[{n}]: expr gives {value[:60]!r} on its input, "
                    f"stored output is {t['output'][:60]!r}")
        tasks.append(Task(program, t["input"], value))
    item = Item(tuple(tasks), condition=extra["condition"], assistant_prefix=extra["assistant_prefix"])
    fmt = formats.Formatter(extra["prompt_format"], extra["answer_format"], library=lib, library_tag=tag)
    p = formats.prepare(item, fmt.lib)
    expected = fmt.ground_truth(item, p)
    if json.loads(expected) != gt:
        want = json.loads(expected)
        diff = sorted(set(want) ^ set(gt) | {k for k in want if k in gt and want[k] != gt[k]})
        return _schema_message(gt) or f"ground_truth fields {', '.join(diff)} differ from what the parsed program gives"
    if gt["mode"] != fmt.mode:
        return f"ground_truth.mode {gt['mode']!r} but prompt_format {extra['prompt_format']!r}"
    if extra["depth"] != max(p.depths) or extra["k"] != len(p.recall) or list(extra["ops"]) != list(p.ops_sorted):
        return "extra_info depth / k / ops disagree with the program"
    prompt = row["prompt"]
    if extra.get("prompt_template"):
        # a user's wording (recipe prompt_template, hashed here): it must show the program and the input
        shown = fmt.shown_code(p.recall, p.programs)
        if not prompt or prompt[-1]["role"] != "user" or shown not in prompt[-1]["content"] \
                or item.tasks[0].input not in prompt[-1]["content"]:
            return "prompt (from a template) does not show the program and its input"
    elif not prompt or prompt[-1]["role"] != "user" or prompt[-1]["content"] != fmt.prompt(item, p):
        return "prompt differs from the prompt format's rendering of the program"
    if kind == "sft":
        gold = fmt.answer(item, p)
        if row["response"] != gold:
            return "response differs from the gold answer of the answer format"
        problem = check_answer(row["response"], extra["answer_format"], gt, lib)
        if problem:
            return problem
        msgs = row["messages"]
        if [m["role"] for m in msgs] != ["user", "assistant"] or msgs[1]["content"] != gold \
                or msgs[0]["content"] != row["prompt_text"]:
            return "messages are not [user prompt, assistant gold answer]"
    return ""


def check_answer(text: str, answer_format: str, gt: dict, lib: OperatorLibrary = STUDY) -> str:
    """That a gold answer re-parses per docs/contracts.md and its code is the row's program (the
    answer format's strict check, :attr:`opgen.formats.AnswerFormat.check`, over the rows' library)."""
    return formats.answer_spec(answer_format).check(text, gt, lib)


def sandbox_runner(workers: int = 2, timeout_s: float = 5.0) -> Callable[[list[tuple[str, str, tuple]]], list]:
    """Runs (code, entry, args) jobs through the scorer's sandbox; returns its results (status, value)."""

    def run(jobs: list[tuple[str, str, tuple]]) -> list:
        from opgen.score.sandbox import Job, Sandbox

        with Sandbox(workers=workers, timeout_s=timeout_s) as box:
            return box.run([Job(code=c, entry=e, args=a) for c, e, a in jobs])

    return run


def _foreign_jobs(batch: list[dict], first: int, report: FileReport) -> tuple[list, list]:
    jobs, expected = [], []
    for n, row in enumerate(batch):
        index = first + n
        try:
            gt = truth.read(row["reward_model"]["ground_truth"], "reward_model.ground_truth")
        except (truth.GroundTruthError, TypeError, KeyError) as exc:
            report.fail(index, str(exc))
            continue
        errors = list(_gt_validator("native_ground_truth.schema.json").iter_errors(gt))
        if errors:
            report.fail(index, f"ground_truth: {errors[0].message}")
            continue
        jobs.append((gt["ref_code"], gt["funcname"], tuple(gt["ref_input"].values())))
        expected.append((index, gt["ref_output"]))
    return jobs, expected


# ---------------------------------------------------------------- files


def _batches(pf: pq.ParquetFile) -> Iterator[list[dict]]:
    for batch in pf.iter_batches(batch_size=BATCH):
        yield batch.to_pylist()


def validate_file(path: Path, run_foreign: Callable | None = None,
                  on_rows: Callable[[int], object] | None = None, library: OperatorLibrary | None = None) -> FileReport:
    """Check one file; ``on_rows(n)`` is called after each batch of ``n`` rows (a progress bar's update).
    opgen rows are checked over the library they name (opgen.library.library_of: ``library``, the
    one the user gave, else the study's or the user's store's); one that cannot be had is
    :class:`opgen.library.UnknownLibrary` / :class:`opgen.library.LibraryMismatch`, before any row."""
    report = FileReport(str(path))
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        report.error = f"not a readable parquet file ({exc})"
        return report
    kind, problem = kind_of(pf.schema_arrow)
    if not kind:
        report.error = problem
        return report
    report.kind = kind
    lib = STUDY
    if kind != "foreign":
        try:
            lib = library_of_rows([Path(path)], library)
        except truth.GroundTruthError:  # the first row's own check says what is wrong with it
            lib = library_of(None, library, f"{path}: ")
    try:
        _validate_rows(pf, kind, report, run_foreign, on_rows, lib)
    except (OSError, pa.ArrowException, ValueError) as exc:  # a corrupt page: this file fails, the others run
        report.error = f"unreadable after {report.rows} rows ({type(exc).__name__}: {exc})"
    return report


def _validate_rows(pf: pq.ParquetFile, kind: str, report: FileReport, run_foreign: Callable | None,
                   on_rows: Callable[[int], object] | None = None, lib: OperatorLibrary = STUDY) -> None:
    index = 0
    with expr.recursion_headroom():
        for batch in _batches(pf):
            if kind == "foreign":
                jobs, expected = _foreign_jobs(batch, index, report)
                results = (run_foreign or sandbox_runner())(jobs) if jobs else []
                for (i, want), res in zip(expected, results):
                    if res.status != "ok":
                        report.fail(i, f"ref_code on ref_input: {res.status} {res.detail}".strip())
                    elif res.value != (want if isinstance(want, str) else str(want)):
                        report.fail(i, f"ref_code on ref_input gives {res.value[:60]!r}, "
                                       f"ref_output is {str(want)[:60]!r}")
            else:
                for n, row in enumerate(batch):
                    problem = _check_opgen_row(row, kind, lib)
                    if problem:
                        report.fail(index + n, problem)
                    elif row["extra_info"]["index"] < 0:
                        report.fail(index + n, "extra_info.index is negative")
            index += len(batch)
            report.rows = index
            if on_rows is not None:
                on_rows(len(batch))


def count_rows(files: list[Path]) -> int:
    """Rows the files' footers announce (a progress bar's total; an unreadable file counts 0)."""
    total = 0
    for f in files:
        try:
            total += pq.ParquetFile(f).metadata.num_rows
        except (OSError, pa.ArrowException):
            pass
    return total


def expand(paths: list[Path]) -> list[Path]:
    """Files as given; a directory means its parquet files (a build directory)."""
    out = []
    for p in paths:
        out.extend(sorted(p.glob("*.parquet")) if p.is_dir() else [p])
    return out


def check_manifest(build_dir: Path) -> list[str]:
    """Problems between ``DIR/manifest.json`` and the files beside it (sha256, rows, missing files)."""
    from opgen.write import sha256_of

    path = build_dir / "manifest.json"
    if not path.is_file():
        return []
    try:
        manifest = json.loads(path.read_text())
        listed = [(name, f) for name, split in manifest["splits"].items() for f in split["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        return [f"{path}: not an opgen manifest ({exc})"]
    problems = []
    for split, f in listed:
        file = build_dir / f["path"]
        if not file.is_file():
            problems.append(f"{path}: split {split!r} lists {f['path']}, which is missing")
        elif sha256_of(file) != f["sha256"]:
            problems.append(f"{file}: sha256 differs from the manifest's")
        else:
            try:
                rows = pq.ParquetFile(file).metadata.num_rows
            except (OSError, pa.ArrowException) as exc:
                problems.append(f"{file}: not a readable parquet file ({exc})")
                continue
            if rows != f["rows"]:
                problems.append(f"{file}: row count differs from the manifest's")
    names = listed_files(manifest)
    for entry in sorted(build_dir.iterdir()):
        if entry.name not in names:
            problems.append(f"{entry}: not listed in {path} (a stale or foreign file; a build owns its "
                            f"whole directory)")
    return problems

