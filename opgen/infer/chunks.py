"""Work units of a distributed evaluation: length-aware chunks of rows, and their durable store.

A chunk is a run of whole loop batches (the ``--batch-size`` groups `run` would hand the
backend, in row order), cut where its prompt length reaches ``chunk_rows`` rows' worth of the
pass's mean: a chunk of long prompts holds fewer rows, so no replica is handed most of the long
ones. Because chunks are made of the local loop's own batches, every backend call sees the same
rows as in a local run, whatever the number of replicas; chunk boundaries do not depend on it.

Each finished chunk is one file, written atomically (temporary name, fsync, rename) under
``OUT/.chunks/<model>/<pass>/<first row:010d>.jsonl``, its lines those of the generations file
(one per row, keyed by row index; a row's samples are one line). Pending rows of a run never
overlap rows already stored, so a chunk's first row names it uniquely across resumed runs.
When a pass has all its rows, `assemble` merges the chunks into ``<pass>_generations.jsonl``
(after any lines it already held, rows in order: the local loop's file) and removes the chunks.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from opgen.infer.run import RESUME_FIELDS, LogError, Row, read_log

CHUNKS_DIR = ".chunks"


def row_cost(row: Row) -> int:
    """A row's share of the work, for balancing: the characters the model is shown."""
    return sum(len(content) for _, content in row.messages) + len(row.assistant_prefix) + 1


def make_chunks(rows: Sequence[Row], batch_size: int, chunk_rows: int) -> list[list[list[Row]]]:
    """Chunks (each a list of batches) of ``rows``, in row order."""
    if batch_size < 1 or chunk_rows < 1:
        raise ValueError("batch_size and chunk_rows must be >= 1")
    batches = [list(rows[i:i + batch_size]) for i in range(0, len(rows), batch_size)]
    if not batches:
        return []
    target = chunk_rows * sum(row_cost(r) for r in rows) / len(rows)
    chunks: list[list[list[Row]]] = []
    current: list[list[Row]] = []
    cost = 0
    for batch in batches:
        current.append(batch)
        cost += sum(row_cost(r) for r in batch)
        if cost >= target:
            chunks.append(current)
            current, cost = [], 0
    if current:
        chunks.append(current)
    return chunks


def chunk_name(chunk: Sequence[Sequence[Row]]) -> str:
    return f"{chunk[0][0].index:010d}.jsonl"


class ChunkStore:
    """The chunk files of one pass (one model on one data file, plain or decomposed)."""

    def __init__(self, out: Path, model: str, pass_name: str):
        self.dir = Path(out) / CHUNKS_DIR / model / pass_name

    def files(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.suffix == ".jsonl" and not p.name.startswith("."))

    def clear(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name: str, lines: Sequence[str]) -> Path:
        """One chunk's lines, durably: a reader sees the whole chunk or none of it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(lines))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.dir / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.dir)
        return self.dir / name

    def done(self) -> dict[int, dict]:
        """Rows stored in chunks: index -> the fields resume checks."""
        rows: dict[int, dict] = {}
        for path in self.files():
            for idx, rec in read_log(path, keep=RESUME_FIELDS).items():
                if idx in rows:
                    raise LogError(f"{path}: row {idx} is also in another chunk of {self.dir}")
                rows[idx] = rec
        return rows

    def assemble(self, gen_path: Path) -> int:
        """Append the chunks' rows that ``gen_path`` lacks to it, in row order, atomically; remove the
        chunks. Returns the number of lines added."""
        if not self.files():  # nothing to add: the file stays as it is (no copy of a long file)
            self.clear()
            return 0
        kept = read_log(gen_path, repair=True, keep=()) if gen_path.exists() else {}
        gen_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{gen_path.name}.", dir=gen_path.parent)
        added = 0
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                if gen_path.exists():
                    with open(gen_path, encoding="utf-8") as src:
                        shutil.copyfileobj(src, fh)
                for idx, line in heapq.merge(*(indexed_lines(p) for p in self.files())):
                    if idx not in kept:
                        fh.write(line)
                        added += 1
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, gen_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(gen_path.parent)
        self.clear()
        return added


def indexed_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(row index, line) of each line of a generations or chunk file, in file order."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)["index"], line


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
