"""``DIR/manifest.json``: what was built, from what, and proof of what it contains."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from opgen import __version__, ops


def _counts(values: np.ndarray) -> dict[str, int]:
    keys, counts = np.unique(values, return_counts=True)
    return {str(int(k)): int(c) for k, c in zip(keys, counts)}


def length_stats(lengths: np.ndarray) -> dict[str, int]:
    """Nearest-rank statistics (integers, no interpolation): min, median, p99, max."""
    if lengths.size == 0:
        return {"min": 0, "median": 0, "p99": 0, "max": 0}
    s = np.sort(lengths)
    n = s.size

    def rank(q: float) -> int:
        return int(s[max(int(np.ceil(q * n)) - 1, 0)])

    return {"min": int(s[0]), "median": rank(0.5), "p99": rank(0.99), "max": int(s[-1])}


def split_section(cfg, rows: int, files: list[dict], depth: np.ndarray, k: np.ndarray, opmask: np.ndarray,
                  conditions: Counter, out_len: np.ndarray, rejections: Counter, mode: str) -> dict:
    op_counts = {}
    for op in ops.OPERATORS:
        n = int(np.count_nonzero(opmask & np.array(1 << op.index, dtype=ops.MASK_DTYPE)))
        if n:
            op_counts[op.id] = n
    return {
        "family": cfg.family, "kind": cfg.kind, "role": cfg.role, "mode": mode, "generator": cfg.generator,
        "prompt_format": cfg.prompt_format, "answer_format": cfg.answer_format, "rows": rows, "files": files,
        "counts": {"depth": _counts(depth), "k": _counts(k), "op": op_counts,
                   "condition": dict(sorted((c, n) for c, n in conditions.items() if c and n > 0))},
        "output_length": length_stats(out_len),
        "rejections": dict(sorted(rejections.items())),
    }


def manifest(recipes, seed: int | None, splits: dict, leakage: dict, limit: int | None) -> dict:
    return {
        "opgen_version": __version__,
        "recipes": [{"name": r.name, "path": r.path, "sha256": r.sha256, "resolved": r.resolved()} for r in recipes],
        "seed": seed if seed is not None else (recipes[0].seed if len(recipes) == 1 else [r.seed for r in recipes]),
        "limit": limit,
        "splits": splits,
        "leakage": leakage,
    }


def dumps(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
