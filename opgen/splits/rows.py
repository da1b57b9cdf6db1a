"""Atoms and compounds of built rows: parquet files or build folders → :class:`RowUnits` per row.

A row's programs are read from its ``reward_model.ground_truth`` (``tasks[].expr``) and parsed
into typed trees by :func:`opgen.expr.parse` — the grammar's own parser, never ``eval`` — so the
same function measures rows just built, rows of another build and rows of another machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from opgen import expr as E
from opgen import ops
from opgen.errors import OpgenError
from opgen.splits import compounds as C


class SplitRowsError(ValueError, OpgenError):
    """A file whose rows cannot be measured; the message names the file and row."""

    exit_code = 1


def parquet_files(paths: Sequence[Path]) -> list[Path]:
    """Files as given, folders as their ``*.parquet`` files (sorted, recursively)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.rglob("*.parquet"))
            if not found:
                raise SplitRowsError(f"{p}: no parquet files in this folder")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise SplitRowsError(f"{p}: no such file or folder")
    return out


def rows_file(path: Path) -> pq.ParquetFile:
    """``path`` opened as a parquet file of opgen rows (its footer only: no row is read)."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, ValueError) as exc:
        raise SplitRowsError(f"{path}: not a parquet file ({exc})") from None
    if pf.schema_arrow.get_field_index("reward_model") < 0:
        raise SplitRowsError(f"{path}: no 'reward_model' column: not opgen rows")
    return pf


def row_programs(path: Path, lib: Any = None) -> Iterator[tuple[list[E.Expr], list[str], int]]:
    """Each row's (trees, inputs, depth) in file order, parsed over ``lib`` (an
    opgen.ops.OperatorLibrary; None: the library each row names, the study's for a row naming none,
    another one when this process knows it by its digest: opgen.score.libs)."""
    pf = rows_file(path)
    n = 0
    memo: dict[str, E.Expr] = {}  # rows repeat programs (atomic tasks above all): parse each once
    for batch in pf.iter_batches(batch_size=4096, columns=["reward_model"]):
        for rm in batch.column(0).to_pylist():
            raw = rm.get("ground_truth") if isinstance(rm, dict) else None
            try:
                gt = json.loads(raw) if isinstance(raw, str) else None
                tasks = gt["tasks"] if isinstance(gt, dict) else None
                if not isinstance(tasks, list) or not tasks:
                    raise ValueError("no tasks")
                row_lib = lib if lib is not None else _named_library(gt, path, n)
                trees = [_parse(t["expr"], memo, row_lib) for t in tasks]
                inputs = [str(t.get("input", "")) for t in tasks]
            except (ValueError, KeyError, TypeError) as exc:
                raise SplitRowsError(f"{path}: row {n}: ground_truth has no parseable tasks[].expr ({exc})") from None
            yield trees, inputs, max(E.depth(t) for t in trees)
            n += 1


def units_of(paths: Sequence[Path], spec: C.CompoundSpec = C.DEFAULT, lib: Any = None) -> list[C.RowUnits]:
    """The atoms and compounds of every row of ``paths`` (files or folders), in order."""
    out: list[C.RowUnits] = []
    with E.recursion_headroom():
        for path in parquet_files(paths):
            out += [C.row_units(trees, inputs, spec) for trees, inputs, _ in row_programs(path, lib)]
    return out


def _named_library(gt: Any, path: Path, n: int) -> Any:
    """The library a row's ground truth names (None: the study's), known to this process by digest."""
    named = gt.get("library") if isinstance(gt, dict) else None
    if not isinstance(named, dict):
        return None
    from opgen.score import libs

    digest = named.get("digest")
    try:
        found = libs.get(digest) if isinstance(digest, str) else None
    except KeyError:
        found = None
    if found is None:
        raise SplitRowsError(f"{path}: row {n}: ground_truth.library names library {named.get('name')!r} "
                             f"(digest {str(digest)[:12]}, spec {named.get('spec')!r}), which this process has "
                             "not loaded; give it (--library)")
    return ops.unless_study(found)


def _parse(text: str, memo: dict[str, E.Expr], lib: Any = None) -> E.Expr:
    tree = memo.get(text)
    if tree is None:
        tree = memo[text] = E.parse(text, lib)
    return tree


def depths_of(paths: Sequence[Path], lib: Any = None) -> list[int]:
    with E.recursion_headroom():
        return [d for path in parquet_files(paths) for _, _, d in row_programs(path, lib)]
