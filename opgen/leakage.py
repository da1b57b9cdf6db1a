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
