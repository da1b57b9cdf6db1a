"""A split's content digest: its rows in order, canonically serialized, independent of the parquet encoder.

Parquet bytes depend on the writer's version (pyarrow 21 and 26 write the same rows as different
files), so byte hashes alone cannot show that two machines built the same data. The content digest
is defined on values only (docs/recipes.md, "Reproducibility"):

- The rows of a file, in order, form one table; its columns are visited in schema order, depth
  first. Each node has a path (``prompt``, ``prompt.[]``, ``prompt.[].role``).
- Every node contributes streams, each hashed with SHA-256 over the file's rows in order:
  ``valid`` (one byte per value, 1 or 0 for null); a list node also ``len`` (each list's length
  as little-endian int64, 0 for null); a string or binary leaf ``len`` and ``data`` (the UTF-8 bytes,
  concatenated; null as empty); an integer or boolean leaf ``data`` as little-endian int64; a
  float leaf ``data`` as little-endian float64. Struct nodes only have ``valid``.
- A file's digest is SHA-256 over the lines ``<path>\\t<stream>\\t<hex digest>\\n`` in that order,
  preceded by ``opgen-content-v1\\n``; a split's is SHA-256 over ``opgen-content-v1 split\\n``
  and its files' hex digests, one a line, in file order. (Files are the recipe's shards, so the
  builder digests each shard as it writes it, in parallel, without reading it back.)

Integer widths (int16 vs int64), chunking, row groups, compression and file metadata do not enter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VERSION = "opgen-content-v1"


class _Streams:
    def __init__(self) -> None:
        self.order: list[tuple[str, str]] = []
        self.h: dict[tuple[str, str], hashlib._Hash] = {}

    def put(self, path: str, stream: str, data: bytes | memoryview) -> None:
        key = (path, stream)
        h = self.h.get(key)
        if h is None:
            h = self.h[key] = hashlib.sha256()
            self.order.append(key)
        h.update(data)

    def digest(self) -> str:
        top = hashlib.sha256(VERSION.encode() + b"\n")
        for key in self.order:
            top.update(f"{key[0]}\t{key[1]}\t{self.h[key].hexdigest()}\n".encode())
        return top.hexdigest()


def _bits(buf, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, dtype="u1"), bitorder="little")[offset: offset + n]


def _valid_np(arr: pa.Array) -> np.ndarray:
    buf = arr.buffers()[0]
    if buf is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return _bits(buf, arr.offset, len(arr)).astype(bool)


def _offsets(arr: pa.Array, large: bool) -> np.ndarray:
    return np.frombuffer(arr.buffers()[1], dtype="<i8" if large else "<i4")[arr.offset: arr.offset + len(arr) + 1]


def _masked(values: np.ndarray, arr: pa.Array) -> np.ndarray:
    values = values.astype("<i8") if values.dtype.kind in "iub" else values.astype("<f8")
    if arr.null_count:
        values = np.where(_valid_np(arr), values, 0).astype(values.dtype)
    return values


# Buffers are read directly: pyarrow.compute costs ~40 ms to import, np.asarray and fill_null
# reach pa.scalar / __array__, which import pandas (0.2 s). Only a null over a non-empty string
# segment (which opgen never writes) takes a path through pyarrow.compute.
def _visit(s: _Streams, path: str, arr: pa.Array) -> None:
    t = arr.type
    s.put(path, "valid", b"\x01" * len(arr) if arr.null_count == 0 else _valid_np(arr).astype("u1").tobytes())
    if pa.types.is_struct(t):
        for k, child in enumerate(arr.flatten()):
            _visit(s, f"{path}.{t.field(k).name}", child)
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = _offsets(arr, pa.types.is_large_list(t))
        raw = np.diff(offsets)
        lens = _masked(raw, arr)
        s.put(path, "len", lens.tobytes())
        if (lens == raw).all():  # the values of the lists, in order (flatten() would import pyarrow.compute)
            values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        else:  # a null over a non-empty segment: its values do not count
            values = arr.flatten()
        _visit(s, f"{path}.[]", values)
        return
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        lens = np.diff(_offsets(arr, large))
        if arr.null_count:
            s.put(path, "len", _masked(lens, arr).tobytes())
            if lens[~_valid_np(arr)].any():  # a null over a non-empty segment (legal, rare): drop it
                import pyarrow.compute as pc

                arr = arr.filter(pc.is_valid(arr))  # a null contributes no bytes
        else:
            s.put(path, "len", lens.astype("<i8").tobytes())
        if len(arr) and arr.buffers()[2] is not None:
            offsets = _offsets(arr, large)
            s.put(path, "data", memoryview(arr.buffers()[2])[int(offsets[0]): int(offsets[-1])])
        return
    if pa.types.is_boolean(t):
        s.put(path, "data", _masked(_bits(arr.buffers()[1], arr.offset, len(arr)), arr).tobytes())
        return
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        kind = "f" if pa.types.is_floating(t) else ("i" if pa.types.is_signed_integer(t) else "u")
        dtype = np.dtype(f"<{kind}{t.bit_width // 8}")
        values = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr)]
        s.put(path, "data", _masked(values, arr).tobytes())
        return
    raise ValueError(f"column {path!r}: type {t} has no canonical serialization")


class Digest:
    """A file's content digest, fed table by table in row order."""

    def __init__(self) -> None:
        self._s = _Streams()

    def update(self, table: pa.Table | pa.RecordBatch) -> None:
        for batch in (table.to_batches() if isinstance(table, pa.Table) else [table]):
            for name, column in zip(batch.schema.names, batch.columns):
                _visit(self._s, name, column)

    def hexdigest(self) -> str:
        return self._s.digest()


def digest_tables(tables: Iterable[pa.Table]) -> str:
    """One file's content digest from its rows (tables in order)."""
    d = Digest()
    for table in tables:
        d.update(table)
    return d.hexdigest()


def digest_file(path: Path) -> str:
    pf = pq.ParquetFile(path)
    return digest_tables(pf.read_row_group(rg) for rg in range(pf.num_row_groups))


def combine(file_digests: Iterable[str]) -> str:
    """A split's content digest from its files' (in file order)."""
    return hashlib.sha256((VERSION + " split\n" + "".join(d + "\n" for d in file_digests)).encode()).hexdigest()


def digest_files(paths: Iterable[Path]) -> str:
    """The content digest of a split stored in ``paths`` (its files, in order)."""
    return combine(digest_file(p) for p in paths)
