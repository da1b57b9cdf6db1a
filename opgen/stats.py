"""``opgen stats``: counts and histograms of any opgen parquet file or build directory."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from opgen import ops
from opgen.manifest import length_stats


def collect(paths: list[Path]) -> dict:
    import numpy as np

    counts = {"depth": Counter(), "k": Counter(), "op": Counter(), "structure": Counter(), "condition": Counter(),
              "split": Counter(), "data_source": Counter()}
    lengths = []
    n = 0
    for path in paths:
        pf = pq.ParquetFile(path)
        has_extra = pf.schema_arrow.get_field_index("extra_info") >= 0
        for batch in pf.iter_batches(batch_size=4096, columns=["data_source", "reward_model"]
                                     + (["extra_info"] if has_extra else [])):
            d = batch.to_pydict()
            for k, src in enumerate(d["data_source"]):
                n += 1
                counts["data_source"][src] += 1
                gt = json.loads(d["reward_model"][k]["ground_truth"])
                outs = [t["output"] for t in gt["tasks"]] if "tasks" in gt else [gt.get("ref_output", "")]
                lengths.append(max(len(str(o)) for o in outs))
                if has_extra:
                    e = d["extra_info"][k]
                    for key in ("depth", "k", "structure", "split"):
                        if key in e:
                            counts[key][e[key]] += 1
                    if e.get("condition"):
                        counts["condition"][e["condition"]] += 1
                    for o in e.get("ops") or ():
                        counts["op"][o] += 1
    return {"rows": n, "counts": {k: dict(v) for k, v in counts.items() if v},
            "output_length": length_stats(np.array(lengths, dtype=np.int64)), "lengths": lengths}


def _order(key: str, value: object) -> tuple:
    if key == "op" and isinstance(value, str) and value in ops.BY_ID:
        return (ops.BY_ID[value].index,)
    return (0, value) if isinstance(value, int) else (1, str(value))


def render(stats: dict, width: int = 40) -> str:
    lines = [f"rows: {stats['rows']}"]
    for key, table in stats["counts"].items():
        lines.append(f"\n{key}:")
        top = max(table.values())
        label_w = max(len(str(v)) for v in table)
        for value in sorted(table, key=lambda v: _order(key, v)):
            c = table[value]
            bar = "█" * max(1, round(width * c / top))
            lines.append(f"  {str(value).rjust(label_w)}  {str(c).rjust(7)}  {bar}")
    ol = stats["output_length"]
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
