"""The one-process grading floor: what grading a canonical answer costs with nothing around it.

    python benchmarks/floor_score.py DATA.parquet RESPONSES.jsonl [--limit N]

For each response (one process, no isolation, no diagnostics, no report): take the program's last
code block, ``ast.parse`` it, read ``main_solution``'s returned expression, evaluate it with opgen's
own operators (``opgen.expr.evaluate``, the code the builder ran) on the row's input, and compare
with the expected output. Prints CPU per response and how many were correct: the figure
`benchmarks/bench_scale.py` divides `opgen score`'s CPU by (issue 32: "the one-process floor").
Rows are read in record batches and responses one line at a time, as the scorer reads them.
"""

from __future__ import annotations

import argparse
import ast
import json
import resource
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from opgen import expr as E


def last_block(text: str) -> str | None:
    """The last fenced code block's body (```python ... ```)."""
    end = text.rfind("```")
    if end < 0:
        return None
    start = text.rfind("```", 0, end)
    if start < 0:
        return None
    body = text[start + 3:end]
    return body.split("\n", 1)[1] if "\n" in body else None


def grade_floor(response: str, task: dict) -> bool:
    code = last_block(response)
    if code is None:
        return False
    try:
        module = ast.parse(code)
    except SyntaxError:
        return False
    entry = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == task["entry"]]
    if not entry or not isinstance(entry[-1].body[-1], ast.Return) or entry[-1].body[-1].value is None:
        return False
    try:
        tree = E.parse(ast.unparse(entry[-1].body[-1].value))
        with E.recursion_headroom():
            return E.evaluate(tree, task["input"]) == task["output"]
    except Exception:  # a wrong program is a wrong answer, never the floor's failure
        return False


def cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def run(data: Path, responses: Path, limit: int | None = None) -> dict:
    """CPU seconds per response over the first ``limit`` responses (all by default)."""
    truths: dict[int, dict] = {}
    n = correct = 0
    c0, t0 = cpu(), time.perf_counter()
    batches = pq.ParquetFile(data, pre_buffer=False).iter_batches(batch_size=4096, columns=["reward_model"])
    start = 0
    with open(responses, "rb") as fh:
        for raw in fh:
            if limit is not None and n >= limit:
                break
            line = json.loads(raw)
            i = line["index"]
            while i not in truths:  # rows in order, one batch at a time
                truths = {start + k: json.loads(rm["ground_truth"])
                          for k, rm in enumerate(next(batches).column("reward_model").to_pylist())}
                start += len(truths)
            task = truths[i]["tasks"][0]
            for text in line.get("responses") or [line["response"]]:
                n += 1
                correct += grade_floor(text, task)
    return {"responses": n, "correct": correct, "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0,
            "cpu_ms_per_response": (cpu() - c0) / max(n, 1) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("responses", type=Path)
    ap.add_argument("--limit", type=int, default=None, help="responses to grade (default: all)")
    args = ap.parse_args()
    got = run(args.data, args.responses, args.limit)
    json.dump(got, sys.stdout)
    print()


if __name__ == "__main__":
    main()
