"""Parquet files: one writer configuration for every file, temporary names, sha256.

The bytes of a file depend only on its rows and on these settings (row groups of a fixed size,
zstd, no timestamps), never on which process wrote it, so builds are byte-identical across worker
counts. Files are written into a build's staging directory (opgen.outdir) and swapped in whole.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 10_000
COMPRESSION = "zstd"
TMP_DIR = ".opgen-build.tmp"


def shard_names(split: str, n_shards: int) -> list[str]:
    if n_shards == 1:
        return [f"{split}.parquet"]
    return [f"{split}-{k:05d}-of-{n_shards:05d}.parquet" for k in range(n_shards)]


# Columns whose values are (nearly) all distinct: a dictionary page would be built, overflow and be
# thrown away for each of them (10% of the writing time), so they are written plain.
PLAIN_COLUMNS = frozenset({
    "prompt.list.element.content", "reward_model.ground_truth", "extra_info.row_id", "extra_info.index",
    "messages.list.element.content", "response", "prompt_text",
})


def _leaf_paths(t: pa.DataType, prefix: str) -> list[str]:
    if pa.types.is_struct(t):
        return [p for f in t for p in _leaf_paths(f.type, f"{prefix}.{f.name}")]
    if pa.types.is_list(t):
        return _leaf_paths(t.value_type, f"{prefix}.list.element")
    return [prefix]


def dictionary_columns(schema: pa.Schema) -> list[str]:
    return [p for f in schema for p in _leaf_paths(f.type, f.name) if p not in PLAIN_COLUMNS]


def open_writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(str(path), schema, compression=COMPRESSION, use_dictionary=dictionary_columns(schema),
                            write_statistics=False)


def write_chunk(writer: pq.ParquetWriter, table: pa.Table) -> None:
    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)


def write_table(path: Path, table: pa.Table) -> None:
    """Write a whole table the way the builder writes chunk by chunk (same row groups, same bytes)."""
    table = table.combine_chunks()
    writer = open_writer(path, table.schema)
    try:
        for start in range(0, max(table.num_rows, 1), ROW_GROUP_ROWS):
            write_chunk(writer, table.slice(start, ROW_GROUP_ROWS))
    finally:
        writer.close()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    from opgen import files

    files.atomic_write_text(path, text)
