"""Reports `opgen score` wrote before scoring streamed (issue 32), kept to tie the streaming scorer to them.

``tests/data/score_golden/<name>/`` holds, per data file: ``data.parquet`` (the rows, built once with
the recipe below and kept, so a later generator change cannot move them), ``responses.jsonl``
(gold, wrong, empty, chimera, dropped- and added-parameter answers, one to three samples a row,
some rows unanswered), and what the in-memory scorer of commit 29f8497 wrote for them:
``scores.jsonl.gz``, ``summary.json`` and ``summary.csv`` (paths in the summary replaced by
``DATA``/``RESPONSES``).

    python tests/score_golden.py OUT_DIR     # writes those folders (the data, responses and reports)
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "data" / "score_golden"
FILES = ("heldout_trees", "groups", "forward", "native")

RECIPE = """\
name: score-golden
seed: 11
defaults: {kind: rl, role: eval, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  heldout_trees:
    family: heldout_trees
    generator: trees
    options: {ops: all, depths: [1, 2, 3, 4], per_depth: 6}
  groups:
    family: sft_eco
    generator: sft_cell
    kind: sft
    options:
      atomic: {pool: sft-atomic, per_op: 1, ops: all}
      width: [2, 3]
      compositions: {pool: trainop-mixed-d2-4, rows: 4, ops: train, depths: [2, 3]}
  forward:
    family: forward
    generator: trees
    prompt_format: forward
    answer_format: json_output
    options: {ops: all, depths: [1, 2], rows: 8}
"""

NATIVE = [
    {"ref_code": "def main_solution(x):\n    return x[::-1]", "ref_input": {"x": "abc"}, "ref_output": "cba",
     "funcname": "main_solution"},
    {"ref_code": "def main_solution(n):\n    return [n]", "ref_input": {"n": 2}, "ref_output": [2],
     "funcname": "main_solution"},
    {"ref_code": "def main_solution(x):\n    return x + x", "ref_input": {"x": "q"}, "ref_output": "qq",
     "funcname": "main_solution"},
]


def _gold(row: dict) -> str:
    from opgen.notebook import gold_answer

    return gold_answer(row)


def _wrong(row: dict, gold: str) -> str:
    if row["extra_info"].get("mode") == "forward":
        out = json.loads(row["reward_model"]["ground_truth"])["tasks"][0]["output"]
        return gold.replace(json.dumps({"output": out}, ensure_ascii=False),
                            json.dumps({"output": out + " "}, ensure_ascii=False))
    return gold.replace("    return ", "    return 'w' + ", 1)


def _faulty(row: dict, gold: str, k: int) -> str | None:
    """A recall fault of one of the row's operators: func_24 without its depth (a dropped parameter),
    an operator with an extra required parameter (added), or another operator's body (a chimera)."""
    from opgen import ops

    used = row["extra_info"].get("ops") or []
    if k == 0 and "func_24" in used:
        return gold.replace("def func_24(s, depth):", "def func_24(s):")
    for op_id in used:
        src = ops.get(op_id).source
        head = src.split("\n", 1)[0]
        if k == 1 and head.endswith("):") and head in gold:
            return gold.replace(head, head[:-2] + ", extra):")
        if k == 2 and src in gold:
            other = next(o for o in ops.OPERATORS if o.arity == ops.get(op_id).arity and o.id != op_id)
            return gold.replace(src, other.source.replace(other.id, op_id, 1))
    return None


def responses_for(rows: list[dict]) -> list[str]:
    """One JSONL line per answered row: 1, 2 or 3 samples (gold, wrong, empty, recall faults); every
    seventh row has none."""
    lines = []
    for i, row in enumerate(rows):
        if i % 7 == 6:
            continue
        gt = json.loads(row["reward_model"]["ground_truth"])
        if "tasks" not in gt:  # a native benchmark row
            samples = [json.dumps({"output": gt["ref_output"]}), '{"output": "nope"}'][: 1 + i % 2]
        else:
            gold = _gold(row)
            pool = [gold, _wrong(row, gold), "I do not know.", _faulty(row, gold, i % 3)]
            samples = [s for s in pool[i % 4:] + pool[:i % 4] if s is not None][: 1 + i % 3]
        lines.append(json.dumps({"index": i, "responses": samples} if len(samples) > 1 else
                                {"index": i, "response": samples[0]}, ensure_ascii=False) + "\n")
    return lines


def build(out: Path) -> dict[str, Path]:
    """The recipe built into ``out/build`` (and the native rows): data file name -> parquet path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(RECIPE)
    subprocess.run([sys.executable, "-m", "opgen", "build", str(out / "recipe.yaml"), "--out", str(out / "build"),
                    "--workers", "1", "--no-progress"], check=True, capture_output=True)
    paths = {name: out / "build" / f"{name}.parquet" for name in FILES[:3]}
    paths["native"] = out / "native.parquet"
    pq.write_table(pa.table({"data_source": ["codeio-forward-stage1"] * len(NATIVE),
                             "reward_model": [{"style": "rule", "ground_truth": json.dumps(g)} for g in NATIVE]}),
                   paths["native"])
    return paths


def normalized(summary: dict) -> dict:
    return {**summary, "data_path": "DATA", "responses_path": "RESPONSES"}


def write(out: Path) -> None:
    """The golden folders, scored by whichever opgen this interpreter imports."""
    import shutil

    import pyarrow.parquet as pq

    for name, data in build(out / "work").items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data, folder / "data.parquet")
        rows = pq.read_table(folder / "data.parquet").to_pylist()
        (folder / "responses.jsonl").write_text("".join(responses_for(rows)), encoding="utf-8")
        report = out / "work" / f"report-{name}"
        subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(folder / "data.parquet"),
                        "--responses", str(folder / "responses.jsonl"), "--out", str(report), "--no-plots",
                        "--no-progress"], check=True, capture_output=True)
        (folder / "scores.jsonl.gz").write_bytes(gzip.compress((report / "scores.jsonl").read_bytes(), mtime=0))
        summary = normalized(json.loads((report / "summary.json").read_text(encoding="utf-8")))
        (folder / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                             encoding="utf-8")
        shutil.copyfile(report / "summary.csv", folder / "summary.csv")
    shutil.rmtree(out / "work")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
