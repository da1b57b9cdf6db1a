"""The generation loop: data rows -> requests -> backend -> an append-only JSONL, resumable.

Each batch's lines are written and flushed (and fsynced) before the next batch is sent, so an
interrupted evaluation loses at most the batch in flight; ``resume`` reads what is there, drops a
truncated last line, checks that recorded rows still match the data (prompt hash) and generates
the rest. A row the backend failed to answer (retries run out, a refused request) never costs its
batch's other rows: they are written, and the failed row gets a line ``{"index", "prompt_sha256",
"failed": reason}``; the run goes on with the next batch (unless a whole batch failed: then the
server is down and it stops), ends with :class:`RowsFailed` (exit 1), and ``--resume`` asks for
the failed rows again. Once no failed row is left, a file that held failed lines is rewritten in
row order without them, so a resumed file equals an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opgen import faults
from opgen.errors import USAGE, OpgenError
from opgen.infer.base import (
    LENGTH,
    Backend,
    BackendError,
    Generation,
    PartialGeneration,
    Request,
    Sampling,
    prompt_sha256,
)


class DataError(ValueError, OpgenError):
    """A data file that is not in the rows contract (names the file and row)."""

    exit_code = USAGE


class LogError(ValueError, OpgenError):
    """A generations file that cannot be resumed (names the file and line)."""

    exit_code = 1


class RowsFailed(BackendError):
    """Rows the backend did not answer; recorded as failed in the generations file, for ``--resume``."""

    def __init__(self, message: str, failed: int):
        super().__init__(message)
        self.failed = failed


FAILED = "failed"  # the key of a failed row's line


@dataclass(frozen=True)
class Row:
    index: int  # position in its file: what the responses' "index" refers to
    messages: tuple[tuple[str, str], ...]
    assistant_prefix: str
    ground_truth: str
    extra_info: dict
    sha: str
    data_source: str = ""  # what the scorer's records carry of the row


def open_parquet(path: Path, error: type[Exception]) -> tuple[Any, set[str]]:
    """A parquet file opened to be read batch by batch, and its column names; ``error`` naming the
    file when it is not one."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:
        raise error(f"{path}: not a readable parquet file ({exc})") from None
    return pf, set(pf.schema_arrow.names)


def read_rows(path: Path, limit: int | None = None) -> list[Row]:
    """The rows of one parquet data file, checked against the rows contract."""
    pf, names = open_parquet(path, DataError)
    for col in ("prompt", "reward_model"):
        if col not in names:
            raise DataError(f"{path}: missing column {col!r} (has {', '.join(sorted(names))})")
    cols = ["prompt", "reward_model"] + [c for c in ("extra_info", "data_source") if c in names]
    rows: list[Row] = []
    try:
        _read_into(rows, pf, path, cols, limit)
    except DataError:
        raise
    except (OSError, ValueError) as exc:  # a corrupt page (pyarrow's errors are these)
        raise DataError(f"{path}: not a readable parquet file: unreadable after row {len(rows)} "
                        f"({type(exc).__name__}: {exc})") from None
    return rows


def _read_into(rows: list[Row], pf: Any, path: Path, cols: list[str], limit: int | None) -> None:
    for batch in pf.iter_batches(batch_size=4096, columns=cols):
        for rec in batch.to_pylist():
            i = len(rows)
            if limit is not None and i >= limit:
                return
            prompt = rec["prompt"]
            if not isinstance(prompt, list) or not prompt or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in prompt):
                raise DataError(f"{path}: row {i}: 'prompt' must be a non-empty list of {{role, content}}")
            gt = (rec["reward_model"] or {}).get("ground_truth")
            if not isinstance(gt, str):
                raise DataError(f"{path}: row {i}: reward_model.ground_truth must be a string")
            extra = rec.get("extra_info") or {}
            prefix = extra.get("assistant_prefix") or ""
            messages = tuple((m["role"], m["content"]) for m in prompt)
            rows.append(Row(i, messages, prefix, gt, extra, prompt_sha256(messages, prefix),
                            rec.get("data_source") or ""))


def read_log(path: Path, repair: bool = False, keep: Sequence[str] | None = None,
             failed: dict[int, str] | None = None) -> dict[int, dict]:
    """Lines of a generations file by index, read as a stream. A last line cut off mid-write is
    dropped (and with ``repair`` cut from the file); a bad line anywhere else is an error.
    ``keep`` names the fields to hold on to (a file of millions of long responses need not fit
    in memory to be resumed); None keeps whole lines. Failed rows' lines are not returned: they
    go into ``failed`` (index -> reason) until a later line answers the row."""
    if not path.exists():
        return {}
    done: dict[int, dict] = {}
    good_end = 0
    size = path.stat().st_size
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                if not raw.endswith(b"\n"):
                    raise ValueError("no line end")  # a write cut before its newline may still parse
                rec = json.loads(raw)
                if not isinstance(rec, dict) or not isinstance(rec.get("index"), int):
                    raise ValueError("no integer 'index'")
            except ValueError as exc:
                if good_end + len(raw) >= size:
                    break
                raise LogError(f"{path}:{lineno}: unreadable line ({exc}); only the last line may be cut off") from None
            if rec["index"] in done:
                raise LogError(f"{path}:{lineno}: row {rec['index']} appears twice")
            good_end += len(raw)
            if FAILED in rec:
                if failed is not None:
                    failed[rec["index"]] = str(rec[FAILED])
                continue
            if failed is not None:
                failed.pop(rec["index"], None)
            done[rec["index"]] = rec if keep is None else {k: rec[k] for k in keep if k in rec}
    if repair and good_end < size:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return done


# what the loop and the report need from each line: not the responses
RESUME_FIELDS = ("prompt_sha256",)
SUMMARY_FIELDS = ("finish_reason", "finish_reasons", "prompt_tokens", "completion_tokens")


@dataclass
class Plan:
    """How rows become requests and how a row's generations become its line."""

    requests: Callable[[Row], list[Request]]
    record: Callable[[Row, list[Generation]], dict]
    sampling: Sampling


def plain_plan(sampling: Sampling) -> Plan:
    """One request per row: the row's own prompt (continuing its assistant prefix if it has one)."""

    def requests(row: Row) -> list[Request]:
        return [Request(str(row.index), row.messages, row.assistant_prefix, row.sha)]

    def record(row: Row, gens: list[Generation]) -> dict:
        g = gens[0]
        line: dict = {"index": row.index, "prompt_sha256": row.sha}
        if sampling.n == 1:
            line.update(response=g.responses[0], finish_reason=g.finish_reasons[0],
                        prompt_tokens=g.prompt_tokens,
                        completion_tokens=g.completion_tokens[0] if g.completion_tokens else -1)
        else:
            line.update(responses=g.responses, finish_reasons=g.finish_reasons,
                        prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens)
        return line

    return Plan(requests, record, sampling)


@dataclass
class RunStats:
    rows: int = 0
    skipped: int = 0  # already in the file (resume)
    generated: int = 0
    requests: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"rows": self.rows, "skipped": self.skipped, "generated": self.generated,
             "requests": self.requests, "seconds": round(self.seconds, 3),
             "rows_per_s": round(self.generated / self.seconds, 3) if self.seconds > 0 else None}
        d.update(self.extra)
        return d


def check_done(where: Path, done: dict[int, dict], rows: Sequence[Row]) -> None:
    """Rows recorded earlier must have been generated for the data's prompts."""
    by_index = {r.index: r for r in rows}
    for idx, rec in sorted(done.items()):
        row = by_index.get(idx)
        if row is None:
            continue  # generated under a larger --limit: kept in the file, not graded this time
        if rec.get("prompt_sha256") and rec["prompt_sha256"] != row.sha:
            raise LogError(f"{where}: row {idx} was generated for a different prompt than the data's row {idx} "
                           f"(the data file changed?); start afresh without --resume")


def line_of(record: dict) -> str:
    """A generations file's line: one home for its serialization (the loop and the chunk store)."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


def batch_lines(batch: Sequence[Row], reqs_per_row: Sequence[Sequence[Request]], gens: Sequence[Generation],
                plan: Plan, backend_name: str) -> tuple[list[str], int]:
    """A batch's generations -> its lines (row order) and how many of its rows were truncated."""
    flat = sum(len(qs) for qs in reqs_per_row)
    if len(gens) != flat:
        raise RuntimeError(f"backend {backend_name} returned {len(gens)} generations for {flat} requests")
    pos = 0
    lines = []
    truncated = 0
    for row, qs in zip(batch, reqs_per_row):
        mine = list(gens[pos:pos + len(qs)])
        pos += len(qs)
        truncated += any(r == LENGTH for g in mine for r in g.finish_reasons)
        lines.append(line_of(plan.record(row, mine)))
    return lines, truncated


def failed_line(row: Row, reason: str) -> str:
    return line_of({"index": row.index, "prompt_sha256": row.sha, FAILED: reason})


def generate_batch(backend: Backend, batch: Sequence[Row],
                   plan: Plan) -> tuple[list[str], int, dict[int, str], int]:
    """One batch through the backend: its lines in row order (a failed row's is its failed line),
    how many rows were truncated, the failed rows' reasons by index, and the requests sent."""
    reqs_per_row = [plan.requests(r) for r in batch]
    flat = [q for qs in reqs_per_row for q in qs]
    try:
        gens = backend.generate(flat, plan.sampling) if flat else []
    except PartialGeneration as exc:
        results, errors = exc.results, exc.errors
    else:
        results, errors = list(gens), {}
    if len(results) != len(flat):
        raise RuntimeError(f"backend {backend.name} returned {len(results)} generations for {len(flat)} requests")
    lines, truncated, failed = [], 0, {}
    pos = 0
    for row, qs in zip(batch, reqs_per_row):
        span = range(pos, pos + len(qs))
        pos += len(qs)
        why = [errors[i] for i in span if i in errors or results[i] is None]
        if why or any(results[i] is None for i in span):
            failed[row.index] = (why or ["no answer"])[0]
            lines.append(failed_line(row, failed[row.index]))
            continue
        mine = [g for g in (results[i] for i in span) if g is not None]
        truncated += any(r == LENGTH for g in mine for r in g.finish_reasons)
        lines.append(line_of(plan.record(row, mine)))
    return lines, truncated, failed, len(flat)


def run(backend: Backend, rows: Sequence[Row], out: Path, plan: Plan, *, resume: bool,
        batch_size: int = 256, progress: str | None = None) -> RunStats:
    """Generate every row of ``rows`` not yet answered in ``out``; append their lines in row order.
    Raises :class:`RowsFailed` after the run if some rows failed (their lines say so)."""
    if out.exists() and not resume:
        out.unlink()
    earlier: dict[int, str] = {}
    done = read_log(out, repair=True, keep=RESUME_FIELDS, failed=earlier)
    check_done(out, done, rows)
    pending = [r for r in rows if r.index not in done]
    stats = RunStats(rows=len(rows), skipped=len(rows) - len(pending))
    if not pending:
        if earlier:
            compact(out)
        return stats
    bar = _progress(len(pending), progress)
    truncated = 0
    failed: dict[int, str] = {}
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    stopped = False
    try:
        with open(out, "a", encoding="utf-8") as fh:
            for start in range(0, len(pending), batch_size):
                batch = pending[start:start + batch_size]
                lines, cut, lost, sent = generate_batch(backend, batch, plan)
                truncated += cut
                fh.write("".join(lines))
                fh.flush()
                os.fsync(fh.fileno())
                faults.signal_at("batch-written")
                failed.update(lost)
                stats.generated += len(batch) - len(lost)
                stats.requests += sent
                if bar is not None:
                    bar.update(len(batch))
                    bar.set_postfix(truncated=truncated, failed=len(failed), refresh=False)
                if lost and len(lost) == len(batch):  # nothing answered: the server is down or refuses
                    stopped = start + len(batch) < len(pending)
                    break
    finally:
        stats.seconds = time.perf_counter() - t0
        if bar is not None:
            bar.close()
    if failed:
        first = min(failed)
        left = len(pending) - stats.generated - len(failed)
        raise RowsFailed(f"{out}: {len(failed)} of {len(pending)} rows failed (row {first}: {failed[first]})"
                         + (f"; stopped there, {left} rows not asked" if stopped else "")
                         + f"; the {stats.generated} answered rows are on disk; rerun with --resume to ask "
                           f"for the failed rows again", len(failed))
    if earlier:
        compact(out)
    return stats


def compact(out: Path) -> None:
    """The file in row order without failed lines (once every row is answered), replaced atomically."""
    lines: dict[int, bytes] = {}
    with open(out, "rb") as fh:
        for raw in fh:
            rec = json.loads(raw)
            if FAILED not in rec:
                lines[rec["index"]] = raw
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.writelines(lines[i] for i in sorted(lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _progress(total: int, desc: str | None):
    if desc is None:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="row", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)


def summarize_log(records: Sequence[dict]) -> dict:
    """Counts over a finished generations file: rows, samples, truncations, token use."""
    samples = truncated_samples = truncated_rows = 0
    prompt_tokens: list[int] = []
    completion: list[int] = []
    for rec in records:
        reasons = rec.get("finish_reasons", [rec.get("finish_reason")])
        samples += len(reasons)
        cut = sum(1 for r in reasons if r == LENGTH)
        truncated_samples += cut
        truncated_rows += cut > 0
        if isinstance(rec.get("prompt_tokens"), int) and rec["prompt_tokens"] >= 0:
            prompt_tokens.append(rec["prompt_tokens"])
        tokens = rec.get("completion_tokens")
        for t in (tokens if isinstance(tokens, list) else [tokens]):
            if isinstance(t, int) and t >= 0:
                completion.append(t)
    return {
        "rows": len(records),
        "samples": samples,
        "truncated_rows": truncated_rows,
        "truncated_samples": truncated_samples,
        "truncated_rate": round(truncated_samples / samples, 6) if samples else 0.0,
        "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 3) if prompt_tokens else None,
        "completion_tokens_mean": round(sum(completion) / len(completion), 3) if completion else None,
        "completion_tokens_max": max(completion) if completion else None,
        "completion_tokens_total": sum(completion),
    }
