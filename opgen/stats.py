"""``opgen stats``: counts and histograms of any opgen parquet file or build directory."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from opgen import truth
from opgen.errors import OpgenError
from opgen.library import STUDY, OperatorLibrary, library_of_rows
from opgen.manifest import length_stats


def collect(paths: list[Path], library: OperatorLibrary | None = None) -> dict:
    """Counts and histograms of ``paths``; operators in their library's order (the library the rows
    name, found by opgen.library.library_of: ``library``, the one the user gave, the study's or the
    user's store's)."""
    lib = library_of_rows(paths, library)
    counts: dict[str, Counter] = {"depth": Counter(), "k": Counter(), "op": Counter(), "structure": Counter(),
                                  "condition": Counter(), "split": Counter(), "data_source": Counter()}
    lengths: list[int] = []
    n = 0
    for path in paths:
        try:
            n = _collect_file(path, counts, lengths, n)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # pyarrow's errors are OSError/ValueError
            raise StatsError(f"{path}: {type(exc).__name__}: {exc}") from None
    counts["op"] = Counter({o: counts["op"][o] for o in sorted(counts["op"], key=lambda o: _op_order(o, lib.position))})
    out = {"rows": n, "counts": {k: dict(v) for k, v in counts.items() if v},
           "output_length": length_stats(np.array(lengths, dtype=np.int64)), "lengths": lengths}
    out["split"] = _split(paths, lib)
    out["library"] = {"name": lib.name, "digest": lib.digest}
    return out


def _split(paths: list[Path], lib: OperatorLibrary) -> dict | None:
    """Atoms, compounds and split certificates (opgen.splits.report); None for rows without opgen programs."""
    from opgen.splits import report, rows

    try:
        return report.stats_section(paths, lib)
    except rows.SplitRowsError:
        return None


class StatsError(ValueError, OpgenError):
    """A file stats cannot read (not parquet, not verl rows); the message names it."""

    exit_code = 1


def _collect_file(path: Path, counts: dict, lengths: list, n: int) -> int:
    pf = pq.ParquetFile(path)
    for name in ("data_source", "reward_model"):
        if pf.schema_arrow.get_field_index(name) < 0:
            raise ValueError(f"no {name!r} column: not verl rows")
    has_extra = pf.schema_arrow.get_field_index("extra_info") >= 0
    row = 0
    for batch in pf.iter_batches(batch_size=4096, columns=["data_source", "reward_model"]
                                 + (["extra_info"] if has_extra else [])):
        d = batch.to_pydict()
        for k, src in enumerate(d["data_source"]):
            n += 1
            counts["data_source"][src] += 1
            lengths.append(_output_length(d["reward_model"][k], row))
            row += 1
            e = d["extra_info"][k] if has_extra else None
            if isinstance(e, dict):  # another project's extra_info may hold anything: count plain values
                for key in ("depth", "k", "structure", "split"):
                    if isinstance(e.get(key), (int, str)):
                        counts[key][e[key]] += 1
                if isinstance(e.get("condition"), str) and e["condition"]:
                    counts["condition"][e["condition"]] += 1
                ops_ = e.get("ops")
                for o in ops_ if isinstance(ops_, list) else ():
                    if isinstance(o, str):
                        counts["op"][o] += 1
    return n


def _output_length(reward_model: object, row: int = 0) -> int:
    """The longest gold output: opgen's tasks, a native row's ref_output, else (another project's verl
    row) the ground truth's own text."""
    raw = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if isinstance(raw, str) and truth.text_too_deep(raw):
        raise ValueError(f"row {row}: ground_truth nests deeper than {truth.MAX_DEPTH} levels")
    try:
        gt = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        gt = None
    if isinstance(gt, dict) and isinstance(gt.get("tasks"), list) and gt["tasks"]:
        return max(len(str(t.get("output", ""))) if isinstance(t, dict) else 0 for t in gt["tasks"])
    if isinstance(gt, dict) and "ref_output" in gt:
        return len(str(gt["ref_output"]))
    return len(raw) if isinstance(raw, str) else len(str(raw or ""))


def _op_order(op_id: str, position: dict[str, int]) -> tuple:
    """An operator's place: its position in the library, then any id it does not hold, by name."""
    return (0, position[op_id], "") if op_id in position else (1, 0, op_id)


def _order(value: object) -> tuple:
    return (0, value) if isinstance(value, int) else (1, str(value))


def render(stats: dict, width: int = 40) -> str:
    lines = [f"rows: {stats['rows']}"]
    lib = stats.get("library")
    if lib and lib.get("digest") != STUDY.digest:
        lines.append(f"library: {lib['name']} (digest {lib['digest'][:12]})")
    for key, table in stats["counts"].items():
        lines.append(f"\n{key}:")
        top = max(table.values())
        label_w = max(len(str(v)) for v in table)
        # operators as collect() ordered them (their library's order); other tables sorted by value
        for value in (table if key == "op" else sorted(table, key=_order)):
            c = table[value]
            bar = "█" * max(1, round(width * c / top))
            lines.append(f"  {str(value).rjust(label_w)}  {str(c).rjust(7)}  {bar}")
    ol = stats["output_length"]
    if stats.get("split"):
        from opgen.splits.report import render_stats_section

        lines.append(render_stats_section(stats["split"]))
    lines.append(f"\noutput length: min {ol['min']}, median {ol['median']}, p99 {ol['p99']}, max {ol['max']}")
    lengths = stats["lengths"]
    if lengths:
        edges = [0, 10, 25, 50, 100, 250, 500, 1000, 10**9]
        hist = Counter(next(i for i, e in enumerate(edges[1:]) if v < e) for v in lengths)
        top = max(hist.values())
        for i in range(len(edges) - 1):
            label = f"{edges[i]}-{edges[i + 1] - 1}" if edges[i + 1] < 10**9 else f"{edges[i]}+"
            c = hist.get(i, 0)
            lines.append(f"  {label.rjust(9)}  {str(c).rjust(7)}  {'█' * (round(width * c / top) if c else 0)}")
    return "\n".join(lines)
