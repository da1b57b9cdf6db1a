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
from typing import Any

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq

from opgen import expr as E
from opgen import formats, rows
from opgen.errors import OpgenError
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


class Libraries:
    """The operator libraries a build's rows name (``ground_truth.library``: name, digest, spec),
    loaded once each: the spec as given, else beside the files or a recipe the manifest names
    (a recipe's ``library:`` YAML path is relative to the recipe). Rows without one are the study's."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self._loaded: dict[tuple[str, str], Any] = {}

    def _candidates(self, spec: str) -> list[str]:
        out = [spec]
        if spec.endswith((".yaml", ".yml")) and not Path(spec).is_absolute() and self.folder is not None:
            out.append(str(self.folder / spec))
            try:
                man = json.loads((self.folder / "manifest.json").read_text())
                out += [str(Path(r["path"]).parent / spec) for r in man.get("recipes", [])]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return out

    def get(self, tag: Any) -> Any:
        """The library ``tag`` names, or a message (str) saying why it cannot be had."""
        from opgen import library as L

        if not isinstance(tag, dict) or not all(isinstance(tag.get(k), str) for k in ("name", "digest", "spec")):
            return "ground_truth.library: a mapping with name, digest and spec"
        key = (tag["spec"], tag["digest"])
        if key not in self._loaded:
            found: Any = f"ground_truth.library: cannot load library {tag['spec']!r}"
            for spec in dict.fromkeys(self._candidates(tag["spec"])):
                try:
                    lib = L.load(spec)
                except L.LibraryError as exc:
                    found = f"ground_truth.library: {exc}"
                    continue
                found = lib if lib.digest == tag["digest"] else (
                    f"ground_truth.library: {spec} has digest {lib.digest[:12]}, the row names {tag['digest'][:12]} "
                    "(the library changed since the build)")
                break
            self._loaded[key] = found
        return self._loaded[key]


_STUDY_ROWS = Libraries()


class RowsLibraryError(ValueError, OpgenError):
    """Files whose rows name different operator libraries, or one that cannot be loaded."""

    exit_code = 1


def _first_library_tag(path: Path) -> Any:
    """The ``ground_truth.library`` of a file's first row (None: the study's, or no opgen row)."""
    try:
        pf = pq.ParquetFile(path)
        if pf.schema_arrow.get_field_index("reward_model") < 0:
            return None
        for batch in pf.iter_batches(batch_size=1, columns=["reward_model"]):
            for rm in batch.column(0).to_pylist():
                raw = rm.get("ground_truth") if isinstance(rm, dict) else None
                gt = json.loads(raw) if isinstance(raw, str) else None
                return gt.get("library") if isinstance(gt, dict) else None
    except (OSError, ValueError):  # not parquet, not JSON: the caller's own reading names it
        return None
    return None


def library_of_rows(paths: list[Path]) -> tuple[Any, dict | None]:
    """(library, tag) of the rows in ``paths`` (parquet files): the library their ground truth names
    (``{"name", "digest", "spec"}``; loaded as ``opgen validate`` loads it, beside the file or its
    build's recipe), the study's (tag None) when they name none. Files naming different libraries,
    or a library that cannot be loaded, raise :class:`RowsLibraryError` naming the files."""
    from opgen import ops

    found: dict[str, tuple[Path, dict]] = {}
    study_file: Path | None = None
    for path in paths:
        tag = _first_library_tag(Path(path))
        if isinstance(tag, dict) and isinstance(tag.get("digest"), str):
            found.setdefault(tag["digest"], (Path(path), tag))
        elif study_file is None:
            study_file = Path(path)
    if not found:
        return ops.STUDY, None
    if len(found) > 1 or study_file is not None:
        named = [f"{p} ({t.get('name')!r}, digest {t['digest'][:12]})" for p, t in found.values()]
        named += [f"{study_file} (the study's)"] if study_file is not None else []
        raise RowsLibraryError(f"the rows name different operator libraries: {'; '.join(named)}; "
                               "give files of one library")
    ((path, tag),) = found.values()
    lib = Libraries(path.parent).get(tag)
    if isinstance(lib, str):
        raise RowsLibraryError(f"{path}: {lib}")
    from opgen.score import libs

    libs.register(lib, tag.get("spec", ""))  # later readers of these rows (split sections) find it by digest
    return lib, tag


def _check_opgen_row(row: dict, kind: str, libraries: Libraries = _STUDY_ROWS) -> str:
    try:
        gt = json.loads(row["reward_model"]["ground_truth"])
    except (TypeError, ValueError) as exc:
        return f"reward_model.ground_truth is not JSON ({exc})"
    try:
        if isinstance(gt, dict) and "library" in gt:
            lib = libraries.get(gt["library"])
            if isinstance(lib, str):
                return lib
            tag = formats.library_member(gt["library"])
            with formats.using_library(lib):
                return _check_parsed(row, gt, kind, lib, tag)
        return _check_parsed(row, gt, kind)
    except (KeyError, TypeError, IndexError, AttributeError):
        return _schema_message(gt) or "ground_truth does not have the contract's shape"


def _schema_message(gt: object) -> str:
    errors = sorted(_gt_validator("ground_truth.schema.json").iter_errors(gt), key=lambda e: list(e.path))
    if not errors:
        return ""
    path = ".".join(str(p) for p in errors[0].path) or "(top level)"
    return f"ground_truth.{path}: {errors[0].message}"


def _check_parsed(row: dict, gt: dict, kind: str, lib: Any = None, tag: str = "") -> str:
    # The schema (schemas/ground_truth.schema.json) is consulted only to explain a mismatch: a
    # ground truth equal to the renderer's own is valid, and checking equality is ten times cheaper.
    extra = row["extra_info"]
    tasks = []
    for n, t in enumerate(gt["tasks"]):
        try:
            program = E.parse(t["expr"], lib)
        except E.ExprError as exc:
            return f"ground_truth.tasks[{n}].expr does not parse: {exc}"
        try:
            value = E.evaluate(program, t["input"], None, lib)
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
        problem = check_answer(row["response"], extra["answer_format"], gt)
        if problem:
            return problem
        msgs = row["messages"]
        if [m["role"] for m in msgs] != ["user", "assistant"] or msgs[1]["content"] != gold \
                or msgs[0]["content"] != row["prompt_text"]:
            return "messages are not [user prompt, assistant gold answer]"
    return ""


def check_answer(text: str, answer_format: str, gt: dict) -> str:
    """That a gold answer re-parses per docs/contracts.md and its code is the row's program (the
    answer format's strict check, :attr:`opgen.formats.AnswerFormat.check`)."""
    return formats.answer_spec(answer_format).check(text, gt)


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
            gt = json.loads(row["reward_model"]["ground_truth"])
        except (TypeError, ValueError) as exc:
            report.fail(index, f"reward_model.ground_truth is not JSON ({exc})")
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
                  on_rows: Callable[[int], object] | None = None) -> FileReport:
    """Check one file; ``on_rows(n)`` is called after each batch of ``n`` rows (a progress bar's update)."""
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
    try:
        _validate_rows(pf, kind, report, run_foreign, on_rows, Libraries(Path(path).parent))
    except (OSError, pa.ArrowException, ValueError) as exc:  # a corrupt page: this file fails, the others run
        report.error = f"unreadable after {report.rows} rows ({type(exc).__name__}: {exc})"
    return report


def _validate_rows(pf: pq.ParquetFile, kind: str, report: FileReport, run_foreign: Callable | None,
                   on_rows: Callable[[int], object] | None = None, libraries: Libraries = _STUDY_ROWS) -> None:
    index = 0
    with E.recursion_headroom():
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
                    problem = _check_opgen_row(row, kind, libraries)
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
    names = {f["path"] for _, f in listed} | {"manifest.json"}
    for entry in sorted(build_dir.iterdir()):
        if entry.name not in names:
            problems.append(f"{entry}: not listed in {path} (a stale or foreign file; a build owns its "
                            f"whole directory)")
    return problems

