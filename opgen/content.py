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
import pyarrow.compute as pc
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


def _np(arr: pa.Array, to: pa.DataType, dtype: str) -> np.ndarray:
    """Values as numpy, nulls as 0. Through the buffer, not np.asarray or fill_null: both reach
    pa.scalar / __array__, which import pandas (0.2 s)."""
    cast = pc.cast(arr, to)
    out = np.frombuffer(cast.buffers()[1], dtype=dtype)[cast.offset: cast.offset + len(cast)]
    if arr.null_count:
        out = np.where(_valid_np(arr), out, 0).astype(dtype)
    return out


def _valid_np(arr: pa.Array) -> np.ndarray:
    v = pc.cast(arr.is_valid(), pa.uint8())
    return np.frombuffer(v.buffers()[1], dtype="u1")[v.offset: v.offset + len(v)].astype(bool)


def _visit(s: _Streams, path: str, arr: pa.Array) -> None:
    t = arr.type
    s.put(path, "valid", b"\x01" * len(arr) if arr.null_count == 0 else _valid_np(arr).astype("u1").tobytes())
    if pa.types.is_struct(t):
        for k, child in enumerate(arr.flatten()):
            _visit(s, f"{path}.{t.field(k).name}", child)
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        s.put(path, "len", _np(pc.list_value_length(arr), pa.int64(), "<i8").tobytes())
        _visit(s, f"{path}.[]", arr.flatten())
        return
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        s.put(path, "len", _np(pc.binary_length(arr), pa.int64(), "<i8").tobytes())
        if arr.null_count:
            arr = arr.filter(arr.is_valid())  # a null contributes no bytes
        width = 8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4
        bufs = arr.buffers()
        if len(arr) and bufs[2] is not None:
            offsets = np.frombuffer(bufs[1], dtype=f"<i{width}")[arr.offset: arr.offset + len(arr) + 1]
            s.put(path, "data", memoryview(bufs[2])[int(offsets[0]): int(offsets[-1])])
        return
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        s.put(path, "data", _np(arr, pa.int64(), "<i8").tobytes())
        return
    if pa.types.is_floating(t):
        s.put(path, "data", _np(arr, pa.float64(), "<f8").tobytes())
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
