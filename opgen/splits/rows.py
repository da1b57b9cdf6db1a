"""Atoms and compounds of built rows: parquet files or build folders → :class:`RowUnits` per row.

A row's programs are read from its ``reward_model.ground_truth`` (``tasks[].expr``) and parsed
into typed trees by :func:`opgen.expr.parse` — the grammar's own parser, never ``eval`` — so the
same function measures rows just built, rows of another build and rows of another machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from opgen import expr, truth
from opgen.errors import OpgenError
from opgen.library import STUDY, OperatorLibrary, ref_of_truth
from opgen.splits import compounds


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


def row_programs(path: Path, lib: OperatorLibrary) -> Iterator[tuple[list[expr.Expr], list[str], int]]:
    """Each row's (trees, inputs, depth) in file order, parsed over ``lib``, the library the rows
    name (opgen.library.library_of of the files' rows): a row naming another one is an error."""
    pf = rows_file(path)
    n = 0
    memo: dict[str, expr.Expr] = {}  # rows repeat programs (atomic tasks above all): parse each once
    for batch in pf.iter_batches(batch_size=4096, columns=["reward_model"]):
        for rm in batch.column(0).to_pylist():
            raw = rm.get("ground_truth") if isinstance(rm, dict) else None
            where = f"{path}: row {n}: ground_truth"
            try:
                gt = truth.read(raw, where)
                ref = ref_of_truth(gt, where)
                tasks = gt.get("tasks")
                if not isinstance(tasks, list) or not tasks:
                    raise ValueError("no tasks")
                trees = [_parse(t["expr"], memo, lib) for t in tasks]
                inputs = [str(t.get("input", "")) for t in tasks]
            except truth.GroundTruthError as exc:
                raise SplitRowsError(str(exc)) from None
            except (ValueError, KeyError, TypeError) as exc:
                raise SplitRowsError(f"{where} has no parseable tasks[].expr ({exc})") from None
            if (ref.digest if ref is not None else STUDY.digest) != lib.digest:
                raise SplitRowsError(f"{where}.library names library {ref or 'study'}, not the library of the "
                                     f"rows before it ({lib.name!r}, digest {lib.digest[:12]})")
            yield trees, inputs, max(expr.depth(t) for t in trees)
            n += 1


def units_of(paths: Sequence[Path], spec: compounds.CompoundSpec = compounds.DEFAULT,
             lib: OperatorLibrary = STUDY) -> list[compounds.RowUnits]:
    """The atoms and compounds of every row of ``paths`` (files or folders), in order."""
    return read(paths, spec, lib).units


@dataclass(frozen=True)
class Rows:
    """What a certificate reads from every row of some files, in one pass (rows in file order)."""

    units: list[compounds.RowUnits]
    depths: list[int]
    facts: list[Any]  # ``fact(trees)`` of each row (empty without one)


def read(paths: Sequence[Path], spec: compounds.CompoundSpec = compounds.DEFAULT, lib: OperatorLibrary = STUDY,
         fact: Callable[[list[expr.Expr]], Any] | None = None) -> Rows:
    """Atoms and compounds, depth and ``fact`` of every row of ``paths`` (files or folders), parsed
    over ``lib``, the library the rows name (opgen.library.library_of_rows)."""
    out = Rows([], [], [])
    with expr.recursion_headroom():
        for path in parquet_files(paths):
            for trees, inputs, depth in row_programs(path, lib):
                out.units.append(compounds.row_units(trees, inputs, spec))
                out.depths.append(depth)
                if fact is not None:
                    out.facts.append(fact(trees))
    return out


def _parse(text: str, memo: dict[str, expr.Expr], lib: OperatorLibrary) -> expr.Expr:
    tree = memo.get(text)
    if tree is None:
        tree = memo[text] = expr.parse(text, lib)
    return tree

