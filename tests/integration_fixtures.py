"""A small two-split build (program rows, train + test) and responses to grade, shared by the
adapter and server tests: one build and one `opgen score` run per session (``graded_build``, behind
the ``graded`` fixture in tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

RECIPE = {
    "name": "adapt", "seed": 3, "leakage": {"heldout_ops": None},
    "splits": {
        "train": {"generator": "trees", "role": "train", "kind": "rl", "family": "adapt",
                  "prompt_format": "closed_book", "answer_format": "ra",
                  "options": {"ops": "train", "depths": [1, 2, 3], "per_depth": 3}},
        "test": {"generator": "chains", "role": "eval", "kind": "rl", "family": "adapt",
                 "prompt_format": "shown", "answer_format": "prose_code",
                 "options": {"ops": "train", "depths": [1, 2], "per_depth": 3}},
    },
}


def write_recipe(path: Path, recipe: dict = RECIPE) -> Path:
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def build(tmp: Path, recipe: dict = RECIPE, *extra: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "build"
    cmd = [sys.executable, "-m", "opgen", "build", str(write_recipe(tmp / "recipe.yaml", recipe)), "--out", str(out),
           "--workers", "1", "--no-progress", *extra]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def rows_of(build_dir: Path, split: str) -> list[dict]:
    man = json.loads((build_dir / "manifest.json").read_text())
    return [r for f in man["splits"][split]["files"] for r in pq.read_table(build_dir / f["path"]).to_pylist()]


def responses_for(rows: list[dict]) -> list[str]:
    """Gold answers, a wrong output, no answer, a program that raises, a truncated answer: a mix
    of every score the scorer gives."""
    from opgen.notebook import gold_answer

    out = []
    for i, row in enumerate(rows):
        gold = gold_answer(row)
        kind = i % 5
        if kind in (0, 3):
            out.append(gold)
        elif kind == 1:
            out.append("```python\ndef main_solution(x):\n    return x + 'q'\n```")
        elif kind == 2:
            out.append("I do not know.")
        else:
            out.append(gold[: len(gold) // 2])
    return out


def opgen_score(tmp: Path, data: Path, responses: list[str], name: str = "s") -> list[dict]:
    """`opgen score` of ``responses`` (one per row of ``data``) -> its scores.jsonl records."""
    rpath = tmp / f"{name}.jsonl"
    rpath.write_text("".join(json.dumps({"index": i, "response": r}) + "\n" for i, r in enumerate(responses)))
    out = tmp / name
    cmd = [sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses", str(rpath), "--out", str(out),
           "--no-plots"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]


def scored_rows(tmp: Path, out: Path, rows: list[dict], name: str, schema_split: str) -> tuple[list[str], list[float]]:
    """``rows`` (of the build ``out``) written to ``tmp/<name>.parquet`` with ``schema_split``'s
    schema, their ``responses_for`` and `opgen score`'s per-row scores of them."""
    responses = responses_for(rows)
    data = tmp / f"{name}.parquet"
    first = json.loads((out / "manifest.json").read_text())["splits"][schema_split]["files"][0]["path"]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(out / first)), data)
    scores = [r["score"] for r in sorted(opgen_score(tmp, data, responses), key=lambda r: r["index"])]
    return responses, scores


def graded_build(tmp: Path) -> tuple[list[dict], list[str], list[float], Path]:
    """RECIPE built in ``tmp``, its two splits' rows concatenated (train, then test), their
    ``responses_for`` and `opgen score`'s per-row scores of them: (rows, responses, scores, build dir)."""
    out = build(tmp)
    rows = rows_of(out, "train") + rows_of(out, "test")
    responses, scores = scored_rows(tmp, out, rows, "all", "train")
    return rows, responses, scores, out
