"""What the scorer reads, as streams: a parquet file of rows (record batches) and a JSONL of responses
(one line at a time). Neither is ever held whole: the memory of a scoring run does not grow with the
number of rows or responses.

Everything that can be checked before grading is: every responses line (JSON, its index, the
samples, a duplicate), the rows' ground truths being strings, the operator library the rows name,
and, when the lines carry one, each ``prompt_sha256`` against the row's prompt (a generations file
scored against other data). The grading pass then reads both files again, in row order; a file that
changed in between is an error, never a report of other data.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opgen.errors import OpgenError
from opgen.library import STUDY, LibraryMismatch
from opgen.score.judge import load_truth
from opgen.score.settings import GradeSettings
from opgen.truth import GroundTruthError

# Rows per record batch read from a parquet file.
READ_BATCH = 4096


class ScoreInputError(ValueError, OpgenError):
    """An input file the scorer cannot use; the message names the file and the line, row or field."""

    exit_code = 1


@dataclass(frozen=True)
class Row:
    """What the scorer reads of one data row."""

    position: int
    ground_truth: str
    data_source: str
    extra: dict


# ---------------------------------------------------------------- the data file


class DataFile:
    """A parquet file of rows, opened and checked (its columns, every ground truth a string) but not
    read: :meth:`rows` reads the rows wanted batch by batch."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = Path(path)
        try:  # ParquetFile, not pq.read_table: that imports pyarrow.dataset (~0.3 s of start-up).
            # pre_buffer off: with it, iterating the batches keeps every column chunk read (memory
            # growing with the file: 80 MB more at 200,000 rows)
            self.file = pq.ParquetFile(self.path, pre_buffer=False)
        except (OSError, ValueError) as exc:
            raise ScoreInputError(f"{self.path}: not a readable parquet file ({exc})") from None
        self.names = set(self.file.schema_arrow.names)
        if "reward_model" not in self.names:
            raise ScoreInputError(f"{self.path}: no column reward_model (columns: "
                                  f"{', '.join(self.file.schema_arrow.names)})")
        self.n_rows = self.file.metadata.num_rows
        self._check_truths()

    def _batches(self, columns: list[str]) -> Iterator[Any]:
        try:
            yield from self.file.iter_batches(batch_size=READ_BATCH, columns=columns)
        except (OSError, ValueError) as exc:  # a corrupt page (pyarrow's errors are these)
            raise ScoreInputError(f"{self.path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None

    def _truth_column(self, batch: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        rm = batch.column("reward_model")
        if not pa.types.is_struct(rm.type) or rm.type.get_field_index("ground_truth") < 0:
            return None
        gt = pc.struct_field(rm, "ground_truth")
        return gt if pa.types.is_string(gt.type) or pa.types.is_large_string(gt.type) else None

    def _check_truths(self) -> None:
        """Every row's reward_model.ground_truth is a string (Arrow's check, no row read in Python)."""
        import pyarrow.compute as pc

        start = 0
        for batch in self._batches(["reward_model"]):
            gt = self._truth_column(batch)
            bad = None
            if len(batch) and gt is None:
                bad = 0
            elif gt is not None and gt.null_count:
                bad = pc.indices_nonzero(pc.is_null(gt))[0].as_py()
            if bad is not None:
                raise ScoreInputError(f"{self.path}: row {start + bad}: reward_model.ground_truth is missing or not "
                                      f"a string")
            start += len(batch)

    def rows(self, wanted: bytearray, extra_fields: Sequence[str] | None = None) -> Iterator[Row]:
        """The rows whose ``wanted`` byte is set, in row order; of ``extra_info``, only the fields
        ``extra_fields`` (None: all of them) are read (Arrow reads and converts no other column)."""
        import pyarrow as pa

        columns = ["reward_model"] + [c for c in ("data_source", "extra_info") if c in self.names]
        extra = self.file.schema_arrow.field("extra_info").type if "extra_info" in self.names else None
        if extra_fields is not None and extra is not None and pa.types.is_struct(extra):
            present = [f for f in extra_fields if extra.get_field_index(f) >= 0]
            columns = [c for c in columns if c != "extra_info"] + [f"extra_info.{f}" for f in present]
            if not present:  # nothing wanted of it: read none of it
                columns = [c for c in columns if not c.startswith("extra_info")]
        start = 0
        for batch in self._batches(columns):
            size = len(batch)
            first = start
            start += size
            if not any(wanted[first:start]):
                continue
            # (no Arrow array is made from Python values here: pyarrow imports pandas for that, ~80 MB)
            truths = self._truth_column(batch).to_pylist()
            sources = batch.column("data_source").to_pylist() if "data_source" in columns else [""] * size
            has_extra = "extra_info" in batch.schema.names
            extras = batch.column("extra_info").to_pylist() if has_extra else [None] * size
            for k in range(size):
                if wanted[first + k]:
                    yield Row(first + k, truths[k], sources[k] or "", extras[k] or {})

    def truths_naming(self, wanted: bytearray, text: str, present: bool) -> Iterator[tuple[int, str]]:
        """(row, ground truth) of the wanted rows whose ground truth holds ``text`` (``present``) or
        does not: a substring search in Arrow, no row parsed."""
        import pyarrow.compute as pc

        start = 0
        for batch in self._batches(["reward_model"]):
            gt = self._truth_column(batch)
            found = pc.match_substring(gt, text)
            for k in pc.indices_nonzero(found if present else pc.invert(found)).to_pylist():
                if wanted[start + k]:
                    yield start + k, gt[k].as_py()
            start += len(batch)

    def prompt_shas(self, wanted: bytearray) -> Iterator[tuple[int, str]]:
        """(row, the sha256 of its prompt as `opgen eval` records it) of the wanted rows, in row order;
        nothing when the file has no prompt column."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from opgen.infer.base import prompt_sha256

        if "prompt" not in self.names:
            return
        columns = ["prompt"] + (["extra_info"] if "extra_info" in self.names else [])
        start = 0
        for batch in self._batches(columns):
            size = len(batch)
            prefixes: list = [None] * size
            if "extra_info" in columns:
                ex = batch.column("extra_info")
                if pa.types.is_struct(ex.type) and ex.type.get_field_index("assistant_prefix") >= 0:
                    prefixes = pc.struct_field(ex, "assistant_prefix").to_pylist()
            prompts = batch.column("prompt").to_pylist()
            for k in range(size):
                if wanted[start + k]:
                    prompt = prompts[k]
                    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
                        yield start + k, prompt_sha256([{"role": m.get("role"), "content": m.get("content")}
                                                        for m in prompt], prefixes[k] or "")
            start += size


# ---------------------------------------------------------------- the responses file


@dataclass(frozen=True)
class Answer:
    """One line of a responses file."""

    index: int
    samples: list[str]
    prompt_sha256: str  # "" when the line carries none
    lineno: int


def parse_line(line: str, n_rows: int, where: str) -> Answer | None:
    """One line of a responses file (None for a blank one); errors name ``where`` (file:line)."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except RecursionError:
        raise ScoreInputError(f"{where}: a JSON value nested deeper than the reader allows; a line is "
                              f'{{"index": i, "response": "..."}}') from None
    except ValueError as exc:
        raise ScoreInputError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ScoreInputError(f"{where}: expected an object, got {type(obj).__name__}")
    index = obj.get("index")
    if type(index) is not int:
        raise ScoreInputError(f"{where}: 'index' must be an integer, got {index!r:.80}")
    if not 0 <= index < n_rows:
        raise ScoreInputError(f"{where}: index {index} does not exist (the data has {n_rows} rows)")
    if "responses" in obj and "response" in obj:
        raise ScoreInputError(f"{where}: both 'response' and 'responses'; give one of them")
    if "responses" in obj:
        got = obj["responses"]
        if not isinstance(got, list) or not got or not all(isinstance(s, str) for s in got):
            raise ScoreInputError(f"{where}: 'responses' must be a non-empty list of strings")
    elif isinstance(obj.get("response"), str):
        got = [obj["response"]]
    else:
        raise ScoreInputError(f"{where}: needs 'response' (a string) or 'responses' (a list of strings)")
    sha = obj.get("prompt_sha256")
    return Answer(index, got, sha if isinstance(sha, str) else "", 0)


def parse_responses(text: str, n_rows: int, source: object) -> dict[int, list[str]]:
    """``{row index: [response, ...]}`` of JSONL text in memory (a chunk of a sweep's generations);
    errors name ``source`` and the line. Lines end at ``\\n`` only: a response may hold U+2028,
    U+0085 ... unescaped (JSON allows them), and ``str.splitlines`` would cut its line there."""
    out: dict[int, list[str]] = {}
    for lineno, line in enumerate(text.split("\n"), 1):
        where = f"{source}:{lineno}"
        got = parse_line(line, n_rows, where)
        if got is None:
            continue
        if got.index in out:
            raise ScoreInputError(f"{where}: duplicate index {got.index}")
        out[got.index] = got.samples
    return out


class Responses:
    """A responses JSONL (``{"index", "response" | "responses"}`` per line), checked whole on opening
    (one pass, one line in memory at a time) and then read again in row order by iterating it.

    Lines in row order (what `opgen eval` writes) are read as they come; a file in any other order
    gets an index of its lines' offsets (8 bytes per data row) and is read row by row through it."""

    def __init__(self, path: Path, n_rows: int, only: Collection[int] | None = None):
        self.path, self.n_rows = Path(path), n_rows
        self.wanted = bytearray(n_rows)  # 1: a row answered (and in ``only``)
        self.answered = self.samples = self.lines = 0
        self.in_order = True
        self.with_sha = False
        self.offsets: Any = None
        seen = bytearray(n_rows)
        previous = -1
        for answer, _offset in self._lines():
            i = answer.index
            if seen[i]:
                raise ScoreInputError(f"{self.path}:{answer.lineno}: duplicate index {i}")
            seen[i] = 1
            self.in_order = self.in_order and i > previous
            previous = i
            self.lines += 1
            if only is not None and i not in only:
                continue
            self.wanted[i] = 1
            self.answered += 1
            self.samples += len(answer.samples)
            self.with_sha = self.with_sha or bool(answer.prompt_sha256)
        if not self.in_order:
            import numpy as np

            self.offsets = np.full(n_rows, -1, dtype=np.int64)
            for answer, offset in self._lines():
                if self.wanted[answer.index]:
                    self.offsets[answer.index] = offset

    def _lines(self) -> Iterator[tuple[Answer, int]]:
        """(answer, the line's byte offset) of every non-blank line, in file order."""
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise ScoreInputError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        offset = 0
        with fh:
            try:
                for lineno, raw in enumerate(fh, 1):
                    answer = self._parse(raw, lineno)
                    if answer is not None:
                        yield answer, offset
                    offset += len(raw)
            except OSError as exc:
                raise ScoreInputError(f"{self.path}: cannot read ({exc.strerror or exc})") from None

    def _parse(self, raw: bytes, lineno: int) -> Answer | None:
        where = f"{self.path}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScoreInputError(f"{where}: not UTF-8 ({exc})") from None
        got = parse_line(line, self.n_rows, where)
        return None if got is None else Answer(got.index, got.samples, got.prompt_sha256, lineno)

    def __iter__(self) -> Iterator[Answer]:
        """The wanted rows' answers, in row order (``lineno`` 0 where the file is read by offset)."""
        count = 0
        if self.offsets is None:
            previous = -1
            for answer, _offset in self._lines():
                if answer.index <= previous:
                    raise self.changed()
                previous = answer.index
                if self.wanted[answer.index]:
                    count += 1
                    yield answer
        else:
            with open(self.path, "rb") as fh:
                for i in range(self.n_rows):
                    offset = int(self.offsets[i])
                    if offset < 0:
                        continue
                    fh.seek(offset)
                    try:
                        got = self._parse(fh.readline(), 0)
                    except ScoreInputError:
                        raise self.changed() from None
                    if got is None or got.index != i:
                        raise self.changed()
                    count += 1
                    yield got
        if count != self.answered:
            raise self.changed()

    def lineno(self, answer: Answer) -> int:
        """The line number of ``answer`` (for an error; counted from the start where it was read by offset)."""
        if answer.lineno or self.offsets is None:
            return answer.lineno
        with open(self.path, "rb") as fh:
            return fh.read(int(self.offsets[answer.index])).count(b"\n") + 1

    def changed(self) -> ScoreInputError:
        return ScoreInputError(f"{self.path}: changed while it was read (its lines are not the ones checked before "
                               f"grading); nothing was written")


# ---------------------------------------------------------------- before grading


def check_prompts(data: DataFile, responses: Responses) -> None:
    """Each line's ``prompt_sha256`` (where it carries one) must be its row's prompt's: a generations
    file of `opgen eval` scored against another data file is refused, as ``--backend replay`` refuses
    it. A data file without prompts has nothing to compare."""
    if not responses.with_sha or "prompt" not in data.names:
        return
    shas = data.prompt_shas(responses.wanted)
    pending = next(shas, None)
    for answer in responses:
        while pending is not None and pending[0] < answer.index:
            pending = next(shas, None)
        if pending is None:
            return
        i, sha = pending
        if i == answer.index and answer.prompt_sha256 and answer.prompt_sha256 != sha:
            raise ScoreInputError(f"{responses.path}:{responses.lineno(answer)}: row {i} was generated for a "
                                  f"different prompt (prompt_sha256 {answer.prompt_sha256[:12]}… vs "
                                  f"{data.path.name}'s {sha[:12]}…): these responses were made for other data "
                                  f"({data.n_rows} rows here); score them against the data file they were "
                                  f"generated from")


def check_libraries(data: DataFile, wanted: bytearray, settings: GradeSettings) -> GradeSettings:
    """The operator library of the rows answered, before any grading: ``settings`` with the library
    the first of them names (:meth:`GradeSettings.for_row`: the one given when its digest matches,
    else the study's or the user's store's), which every other must name too. Only the rows that
    could name another one (Arrow's substring search) are parsed here; the rest is checked again,
    chunk by chunk, as it is graded (:func:`check_truths`)."""
    first = next(data.truths_naming(wanted, "", True), None)  # every row holds ""
    if first is None:
        return settings
    record = check_truths(data.path, [first], settings)
    if record.library.is_study:  # the study's rows name no library
        suspects = data.truths_naming(wanted, '"library"', True)
    else:  # a user library's rows carry its digest
        suspects = data.truths_naming(wanted, record.library.digest, False)
    check_truths(data.path, suspects, settings, record)
    return record


def check_truths(data: Path | str, rows: Iterable[tuple[int, str]], settings: GradeSettings,
                 record: GradeSettings | None = None) -> GradeSettings:
    """``rows``: (row, ground truth) pairs. Each ground truth must be readable (the contract's JSON)
    and name one operator library (:meth:`GradeSettings.for_row`, the one lookup), ``record``'s when
    given, else the first row's: ``settings`` with that library. A malformed ground truth is a
    :class:`ScoreInputError`, a library that cannot be had :class:`opgen.library.UnknownLibrary` or
    :class:`opgen.library.LibraryMismatch`, each naming the row."""
    for index, ground_truth in rows:
        where = f"{data}: row {index}: " if str(data) else f"row {index}: "
        try:
            # parsed once (judge's cache: grade_many finds it there); a row naming the library
            # already resolved needs no second lookup
            named = load_truth(ground_truth).library
            if record is not None and (STUDY.digest if named is None else named.digest) == record.library.digest:
                continue
            row_record = settings.for_row(ground_truth, where)
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
