"""The leakage report: train and eval splits of one build must not share programs or prompts, and
the study's held-out operators must never be composed in a train split.

Inputs are per-row 64-bit keys the builder collected (blake2b of the canonical expression of every
task, and of the prompt text), so the check is a set-membership test and needs no file read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen import ops

KINDS = ("program", "prompt", "heldout_composed")
_EXAMPLES = 5


@dataclass
class SplitKeys:
    name: str
    role: str
    prompt: np.ndarray  # uint64 per row
    program: np.ndarray  # uint64 per task
    program_rows: np.ndarray  # row index of each entry of ``program``
    composed: np.ndarray  # ops.MASK_DTYPE per row: bits of operators that occur in a composed task


# Set operations on key arrays by sorting and binary search: ``np.isin`` / ``np.union1d`` go through
# ``np.unique``, whose first call imports ``numpy.ma`` (30-60 ms of a build's start-up).


def member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, pool)``."""
    if pool.size == 0 or values.size == 0:
        return np.zeros(values.shape, dtype=bool)
    ordered = pool if _is_sorted(pool) else np.sort(pool)
    at = np.searchsorted(ordered, values)
    at[at == ordered.size] = 0
    return ordered[at] == values


def sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)``: the sorted distinct values of both."""
    both = np.concatenate((a, b))
    both.sort(kind="stable")
    if both.size < 2:
        return both
    keep = np.empty(both.size, dtype=bool)
    keep[0] = True
    np.not_equal(both[1:], both[:-1], out=keep[1:])
    return both[keep]


def _is_sorted(a: np.ndarray) -> bool:
    return a.size < 2 or bool(np.all(a[1:] >= a[:-1]))


def check(splits: list[SplitKeys], heldout_ops: tuple[str, ...], allow: tuple[str, ...]) -> dict:
    train = [s for s in splits if s.role == "train"]
    evals = [s for s in splits if s.role == "eval"]
    violations = []
    pairs = []
    for ev in evals:
        for tr in train:
            pairs.append([ev.name, tr.name])
            hit = member(ev.program, tr.program)
            if hit.any():
                rows = sorted_union(ev.program_rows[hit], ev.program_rows[:0])
                violations.append({"kind": "program", "split": ev.name, "train_split": tr.name,
                                   "rows": int(rows.size), "examples": rows[:_EXAMPLES].tolist()})
            hit = member(ev.prompt, tr.prompt)
            if hit.any():
                rows = np.flatnonzero(hit)
                violations.append({"kind": "prompt", "split": ev.name, "train_split": tr.name,
                                   "rows": int(rows.size), "examples": rows[:_EXAMPLES].tolist()})
    mask = 0
    for op_id in heldout_ops:
        mask |= 1 << ops.get(op_id).index
    if mask:
        for tr in train:
            rows = np.flatnonzero(tr.composed & np.array(mask, dtype=ops.MASK_DTYPE))
            if rows.size:
                violations.append({"kind": "heldout_composed", "split": tr.name, "train_split": tr.name,
                                   "rows": int(rows.size), "examples": rows[:_EXAMPLES].tolist()})
    for v in violations:
        v["allowed"] = v["kind"] in allow
    return {
        "ok": all(v["allowed"] for v in violations),
        # what was checked: eval x train pairs for shared programs and prompts, and train splits for
        # held-out operators composed; a build of one kind of split alone has nothing to compare
        "checked": {"pairs": len(pairs), "heldout_composed_splits": len(train) if mask else 0},
        "nothing_to_check": not pairs and not (mask and train),
        "checked_pairs": pairs,
        "heldout_ops": list(heldout_ops),
        "violations": violations,
        "allowed": list(allow),
    }


def describe(report: dict) -> list[str]:
    lines = []
    for v in report["violations"]:
        if v["allowed"]:
            continue
        if v["kind"] == "heldout_composed":
            lines.append(f"train split {v['split']!r}: {v['rows']} rows compose a held-out operator "
                         f"(rows {v['examples']})")
        else:
            lines.append(f"eval split {v['split']!r}: {v['rows']} rows share their {v['kind']} with train split "
                         f"{v['train_split']!r} (rows {v['examples']})")
    return lines


# ---------------------------------------------------------------- across builds: `opgen leakage`
#
# The study's layout is one recipe per cell, the eval suite built on its own, so a build's own
# check never sees a training cell next to the eval files. ``check_files`` applies the study's
# rule to files of separate builds, read back from parquet:
#
#   prompt            an eval prompt (its user turn) is a training prompt
#   task              an eval task (program and input) is a training task
#   program           an eval program with two or more operator calls occurs in training
#                     (single calls are shared by design: the held-out atomic skills are trained)
#   heldout_composed  a training task composes a held-out operator (any task of depth > 1)


class LeakageInputError(ValueError):
    """A path that is not a readable build folder or parquet file of rows; the message names it."""


@dataclass
class FileKeys:
    path: str
    rows: int
    prompt: np.ndarray  # uint64 per row: the user turn's text
    task: np.ndarray  # uint64 per task: program NUL input
    task_rows: np.ndarray
    program: np.ndarray  # uint64 per task with two or more operator calls: the program
    program_rows: np.ndarray
    heldout_composed: np.ndarray  # row indices whose composed tasks use a held-out operator


def parquet_files(paths) -> list:
    """Build folders (every ``*.parquet`` below, sorted) and files, in the order given."""
    from pathlib import Path

    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.parquet") if q.is_file() and ".opgen-build.tmp" not in q.parts)
            if not found:
                raise LeakageInputError(f"{p}: no parquet file in this folder")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise LeakageInputError(f"{p}: no such file or folder")
    return out


def _n_calls(expr: str) -> int:
    from opgen.rows import n_calls

    return n_calls(expr)  # a literal prefix, digits, a bracket: linear


def file_keys(path, heldout_ops: tuple[str, ...]) -> FileKeys:
    """Keys of one parquet file of rows (opgen's, or any verl code-execution rows)."""
    import json

    import pyarrow.parquet as pq

    from opgen.rows import h64

    try:
        table = pq.read_table(path, columns=["prompt", "reward_model"])
    except (OSError, ValueError, KeyError) as exc:
        raise LeakageInputError(f"{path}: not a parquet file of rows with prompt and reward_model ({exc})") from None
    held = set(heldout_ops)
    prompts, tasks, task_rows, progs, prog_rows, composed = [], [], [], [], [], []
    for i, (msgs, rm) in enumerate(zip(table.column("prompt").to_pylist(), table.column("reward_model").to_pylist())):
        text = "\x00".join(str(m.get("content", "")) for m in (msgs or []) if m.get("role") == "user")
        prompts.append(h64(text))
        try:
            gt = json.loads((rm or {}).get("ground_truth") or "{}")
        except ValueError:
            raise LeakageInputError(f"{path}: row {i}: reward_model.ground_truth is not JSON") from None
        if not isinstance(gt, dict):
            raise LeakageInputError(f"{path}: row {i}: reward_model.ground_truth is not a JSON object")
        listed = gt.get("tasks")
        if not isinstance(listed, list):  # a native row: its whole program and input
            listed = [{"expr": str(gt.get("ref_code", "")), "input": json.dumps(gt.get("ref_input"), sort_keys=True),
                       "ops": [], "depth": 1}]
        hit = False
        for t in listed:
            if not isinstance(t, dict):
                raise LeakageInputError(f"{path}: row {i}: ground_truth.tasks holds a non-object")
            expr, x = str(t.get("expr", "")), t.get("input", "")
            x = x if isinstance(x, str) else json.dumps(x, sort_keys=True)
            tasks.append(h64(f"{expr}\x00{x}"))
            task_rows.append(i)
            if _n_calls(expr) >= 2:
                progs.append(h64(expr))
                prog_rows.append(i)
            depth = t.get("depth", 1)
            if isinstance(depth, int) and depth > 1 and any(o in held for o in (t.get("ops") or [])):
                hit = True
        if hit:
            composed.append(i)
    u64 = np.uint64
    return FileKeys(str(path), table.num_rows, np.array(prompts, dtype=u64), np.array(tasks, dtype=u64),
                    np.array(task_rows, dtype=np.int64), np.array(progs, dtype=u64),
                    np.array(prog_rows, dtype=np.int64), np.array(composed, dtype=np.int64))


def _hits(values: np.ndarray, rows: np.ndarray | None, pool: np.ndarray) -> tuple[int, list[int]]:
    hit = member(values, pool)
    if not hit.any():
        return 0, []
    found = np.unique(rows[hit]) if rows is not None else np.flatnonzero(hit)
    return int(found.size), found[:_EXAMPLES].tolist()


def check_files(train_paths, eval_paths, heldout_ops: tuple[str, ...] = ops.HELDOUT_IDS) -> dict:
    """The study's rule over files of separate builds: a report per (train file, eval file) pair."""
    train = [file_keys(p, heldout_ops) for p in parquet_files(train_paths)]
    evals = [file_keys(p, heldout_ops) for p in parquet_files(eval_paths)]
    pairs, violations = [], []
    for tr in train:
        pools = {"prompt": np.sort(tr.prompt), "task": np.sort(tr.task), "program": np.sort(tr.program)}
        for ev in evals:
            found = {"prompt": _hits(ev.prompt, None, pools["prompt"]),
                     "task": _hits(ev.task, ev.task_rows, pools["task"]),
                     "program": _hits(ev.program, ev.program_rows, pools["program"])}
            pair = {"train": tr.path, "eval": ev.path, "train_rows": tr.rows, "eval_rows": ev.rows,
                    "checked": {"prompts": int(ev.prompt.size), "tasks": int(ev.task.size),
                                "multi_call_programs": int(ev.program.size)},
                    **{k: n for k, (n, _) in found.items()}}
            pairs.append(pair)
            for kind, (n, examples) in found.items():
                if n:
                    violations.append({"kind": kind, "train": tr.path, "eval": ev.path, "rows": n,
                                       "examples": examples})
    trains = []
    for tr in train:
        trains.append({"train": tr.path, "rows": tr.rows, "heldout_composed": int(tr.heldout_composed.size)})
        if tr.heldout_composed.size:
            violations.append({"kind": "heldout_composed", "train": tr.path, "eval": "", "rows":
                               int(tr.heldout_composed.size), "examples": tr.heldout_composed[:_EXAMPLES].tolist()})
    return {"ok": not violations, "heldout_ops": list(heldout_ops), "pairs": pairs, "train_files": trains,
            "violations": violations, "nothing_to_check": not pairs and not any(t["rows"] for t in trains)}


def describe_files(report: dict) -> list[str]:
    lines = []
    for v in report["violations"]:
        if v["kind"] == "heldout_composed":
            lines.append(f"{v['train']}: {v['rows']} training rows compose a held-out operator (rows {v['examples']})")
        else:
            what = {"prompt": "prompt", "task": "task (program and input)",
                    "program": "program with two or more calls"}[v["kind"]]
            lines.append(f"{v['eval']}: {v['rows']} rows share their {what} with {v['train']} (rows {v['examples']})")
    return lines


# ---------------------------------------------------------------- leakage.avoid: drawing eval rows apart


_TRAINING_KEYS: dict[tuple, tuple[frozenset, frozenset]] = {}


def training_keys(specs, seed: int | None = None) -> tuple[frozenset, frozenset]:
    """(task keys, multi-call program keys) of the train splits of the recipes ``specs`` — what
    ``opgen leakage`` would read from their built files, computed without building them.

    Each recipe's rows are replayed as the builder draws them (splits in order, a row that repeats
    an earlier row's unique key takes its next candidate), so the keys are those of its files.
    """
    from opgen import recipe as R
    from opgen.expr import recursion_headroom
    from opgen.formats import scan
    from opgen.rows import h64, n_calls

    loaded = [R.load(s, seed) for s in specs]
    key = tuple((r.path, r.sha256, r.seed) for r in loaded)
    if key in _TRAINING_KEYS:
        return _TRAINING_KEYS[key]
    tasks: set[int] = set()
    programs: set[int] = set()
    for recipe in loaded:
        seen: set[int] = set()
        for cfg in recipe.splits:
            gen = R.build_generator(cfg, recipe)
            with recursion_headroom():
                for i in range(gen.count()):
                    j, item = gen.first_valid(i)
                    while True:
                        exprs = [scan(t.program, {})[0] for t in item.tasks]
                        ids = [e + "\x00" + t.input for e, t in zip(exprs, item.tasks)]
                        if cfg.unique == "task":
                            ukey = h64(ids[0]) if len(ids) == 1 else h64("\x01".join(ids))
                        else:
                            ukey = h64(exprs[0]) if len(exprs) == 1 else h64("\x01".join(exprs))
                        if cfg.unique == "none" or ukey not in seen or not gen.REDRAWABLE:
                            break
                        j, item = gen.first_valid(i, j + 1)
                    if cfg.unique != "none":
                        seen.add(ukey)
                    if cfg.role != "train":
                        continue
                    for e, task_id in zip(exprs, ids):
                        tasks.add(h64(task_id))
                        if n_calls(e) >= 2:
                            programs.add(h64(e))
    _TRAINING_KEYS[key] = (frozenset(tasks), frozenset(programs))
    return _TRAINING_KEYS[key]
