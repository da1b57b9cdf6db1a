"""``DIR/manifest.json``: what was built, from what, and proof of what it contains."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from opgen._version import __version__
from opgen.ops import STUDY, OperatorLibrary
from opgen.outdir import LIBRARY_FILE


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
                  conditions: Counter, out_len: np.ndarray, rejections: Counter, mode: str,
                  library: OperatorLibrary = STUDY) -> dict:
    op_counts = {}
    for i, op in enumerate(library.operators):  # an operator's bit: its position in the library
        n = int(np.count_nonzero(opmask & np.array(1 << i, dtype=opmask.dtype)))
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


def fidelity_sections(unchanged: np.ndarray, identity: np.ndarray, target_chars: np.ndarray,
                      condition_of: dict[int, str], prog: np.ndarray, prog_rows: np.ndarray) -> dict:
    """What a split's numbers mean (issue 18): degenerate rows, distinct programs, probe distances.

    ``degenerate``: rows by the number of operator calls that return their argument unchanged,
    and rows whose output equals their input (``return x`` scores there). ``distinct_programs``:
    distinct canonical programs among the split's tasks. ``probe_distances``: per probe condition,
    the target's name→argument distance in characters (nearest-rank min / median / max).
    """
    rows = int(unchanged.size)
    out: dict = {"degenerate": {
        "unchanged_calls": _counts(unchanged),
        "rows_with_unchanged_call": int(np.count_nonzero(unchanged)),
        "output_is_input": int(np.count_nonzero(identity)),
        "non_degenerate_rows": int(np.count_nonzero((unchanged == 0) & (identity == 0))),
        "rows": rows,
    }}
    tasks = int(prog.size)
    ordered = np.sort(prog)
    distinct = int(np.count_nonzero(ordered[1:] != ordered[:-1]) + 1) if tasks else 0
    out["distinct_programs"] = {"tasks": tasks, "programs": distinct,
                                "share": round(distinct / tasks, 6) if tasks else 0.0}
    per: dict[str, list[int]] = {}
    for i, c in sorted(condition_of.items()):
        if c and target_chars[i] >= 0:
            per.setdefault(c, []).append(int(target_chars[i]))
    if per:
        out["probe_distances"] = {c: length_stats(np.array(v)) for c, v in per.items()}
    return out


def versions() -> dict[str, str]:
    """What shapes a build's bytes besides its recipe: the parquet writer above all (docs/recipes.md)."""
    import platform

    import pyarrow

    return {"opgen": __version__, "pyarrow": pyarrow.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def library_section(recipes) -> dict:
    """The build's operator library (one for all its recipes: opgen.build checks): name, digest,
    size and split, and for a library not the study's the canonical file the build folder keeps
    (opgen.outdir.LIBRARY_FILE). Never a path or spec that anything loads."""
    lib = recipes[0].library if recipes else STUDY
    return lib.describe() if lib.is_study else {**lib.describe(), "file": LIBRARY_FILE}


def manifest(recipes, seed: int | None, splits: dict, leakage: dict, limit: int | None) -> dict:
    return {
        "opgen_version": __version__,
        "versions": versions(),
        "recipes": [{"name": r.name, "path": r.path, "sha256": r.sha256, "resolved": r.resolved()} for r in recipes],
        "seed": seed if seed is not None else (recipes[0].seed if len(recipes) == 1 else [r.seed for r in recipes]),
        "limit": limit,
        "splits": splits,
        "leakage": leakage,
        "library": library_section(recipes),
    }


def dumps(obj: dict) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
