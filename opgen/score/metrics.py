"""Numbers of a paper from graded responses: Wilson intervals, unbiased pass@k, recall diagnostics."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opgen.choices import DRIFT_CALLS, PASS_K_ESTIMATORS  # their home (the CLI's choices); re-exported
from opgen.ops import STUDY, OperatorLibrary

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (sensible at 0, 1 and small n)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 and n successes the bounds are exactly 0 and 1; rounding would leave 1e-17 and 0.9999999999999999.
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), as a stable product."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def ks_for(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    ks.append(n)
    return ks


def proportion(successes: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(successes, n)
    return {"n": n, "correct": successes, "acc": successes / n if n else 0.0, "ci_low": lo, "ci_high": hi}


def grouped(records: Iterable[Mapping[str, Any]], key: str | Sequence[str],
            value: str = "acc") -> dict[str, dict[str, Any]]:
    """Accuracy with a 95% Wilson interval per value of ``key`` (a field, or a tuple of fields joined by '|')."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    counts: dict[str, list[int]] = {}
    for r in records:
        label = "|".join(str(r.get(k, "")) for k in keys)
        c = counts.setdefault(label, [0, 0])
        c[0] += int(r[value] >= 1.0)
        c[1] += 1
    return {label: proportion(s, n) for label, (s, n) in sorted(counts.items(), key=lambda kv: _sort_key(kv[0]))}


SCOPES = ("id", "ood", "total")
# The study's buckets of name→argument distance in characters: < 40, 40-150, 150+ (E-co writes
# func_24(s) in 0 / 5 / 18% of blocks there). Bucket i holds edges[i-1] <= chars < edges[i].
DISTANCE_EDGES = (40, 150)


def bucket_labels(edges: Sequence[int]) -> list[str]:
    labels = [f"<{edges[0]}"] if edges else ["all"]
    labels += [f"{a}-{b}" for a, b in zip(edges, edges[1:])]
    if edges:
        labels.append(f"{edges[-1]}+")
    return labels


def bucket_of(chars: int, edges: Sequence[int]) -> str:
    labels = bucket_labels(edges)
    for i, e in enumerate(edges):
        if chars < e:
            return labels[i]
    return labels[-1]


def row_measures(extra: Mapping[str, Any]) -> dict[str, Any]:
    """What a scored record keeps of a row's issue-18 measures: whether the row is degenerate (a
    call returns its argument unchanged, or the output is the input) and, per parameterised
    operator, the row's largest name→argument distance — the call that counts when a row holds
    several calls of the operator (the farthest one, where the study's drift shows first)."""
    out: dict[str, Any] = {"degenerate": None, "output_is_input": None, "op_distance": {}}
    if "unchanged_calls" in extra and extra.get("unchanged_calls") is not None:
        out["output_is_input"] = bool(int(extra.get("output_is_input") or 0))
        out["degenerate"] = bool(int(extra.get("unchanged_calls") or 0)) or out["output_is_input"]
    ops_, chars = extra.get("call_ops") or [], extra.get("call_chars") or []
    tails = extra.get("call_tails") or []
    far: dict[str, int] = {}
    calls: dict[str, list[tuple[int, int]]] = {}
    for i, (op, c) in enumerate(zip(ops_, chars)):
        if isinstance(op, str) and isinstance(c, int):
            if c > far.get(op, -1):
                far[op] = c
            t = tails[i] if i < len(tails) and isinstance(tails[i], int) else -1
            calls.setdefault(op, []).append((c, t))
    out["op_distance"] = dict(sorted(far.items()))
    # every call of each parameterised operator: [chars, tail calls] sorted by distance (the drift
    # options choose from these: farthest, nearest, every)
    out["op_calls"] = {op: [list(ct) for ct in sorted(v)] for op, v in sorted(calls.items())}
    return out


@dataclass(frozen=True)
class MetricDefs:
    """Which definition each configurable metric uses (docs/scoring.md, "Metric definitions"):
    ``drift_call`` — the call of an operator that places its recall block in a distance (and
    tail-call) bucket when a row calls it several times; ``pass_k`` — the pass@k estimator."""

    drift_call: str = "farthest"
    pass_k: str = "unbiased"

    def __post_init__(self) -> None:
        if self.drift_call not in DRIFT_CALLS:
            raise ValueError(f"unknown drift call {self.drift_call!r} (known: {', '.join(DRIFT_CALLS)})")
        if self.pass_k not in PASS_K_ESTIMATORS:
            raise ValueError(f"unknown pass@k estimator {self.pass_k!r} (known: {', '.join(PASS_K_ESTIMATORS)})")

    def describe(self) -> dict[str, str]:
        return {"drift_call": self.drift_call, "pass_at_k": self.pass_k,
                "pass_at_k_estimator": PASS_K_ESTIMATORS[self.pass_k]}


def chosen_calls(record: Mapping[str, Any], op: str, drift_call: str = "farthest") -> list[tuple[int, int]]:
    """(chars, tail calls) of the calls of ``op`` that place its recall block: the farthest, the
    nearest, or every call (then the block counts once in each distinct bucket its calls reach)."""
    calls = (record.get("op_calls") or {}).get(op)
    if not calls:
        far = (record.get("op_distance") or {}).get(op)
        return [] if far is None else [(far, -1)]
    pairs = [(int(c), int(t)) for c, t in calls]
    if drift_call == "farthest":
        return [max(pairs)]
    if drift_call == "nearest":
        return [min(pairs)]
    return pairs


def arity_by_distance(records: Iterable[Mapping[str, Any]], edges: Sequence[int] = DISTANCE_EDGES,
                      drift_call: str = "farthest") -> dict[str, dict[str, dict[str, Any]]]:
    """Per operator and distance bucket: recall blocks written, arity errors among them, the rate
    and its 95% Wilson interval. A block's distance is its row's largest distance for that
    operator (``row_measures``); blocks of operators without a trailing argument are not counted."""
    from opgen import ops

    counts: dict[str, dict[str, list[int]]] = {}
    labels = bucket_labels(edges)
    for r in records:
        for rc in r.get("recalls", ()):
            chosen = chosen_calls(r, rc.get("op"), drift_call)
            if not chosen:
                continue
            per = counts.setdefault(rc["op"], {b: [0, 0] for b in labels})
            for b in sorted({bucket_of(chars, edges) for chars, _t in chosen}):
                per[b][0] += rc.get("verdict") == "arity"
                per[b][1] += 1
    order = {op_id: i for i, op_id in enumerate(ops.ALL_IDS)}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for op in sorted(counts, key=lambda o: order.get(o, len(order))):
        out[op] = {}
        for b in labels:
            a, n = counts[op][b]
            lo, hi = wilson(a, n)
            out[op][b] = {"written": n, "arity": a, "rate": a / n if n else 0.0, "ci_low": lo, "ci_high": hi}
    return out


def arity_by_tail_calls(records: Iterable[Mapping[str, Any]],
                        drift_call: str = "farthest") -> dict[str, dict[str, dict[str, Any]]]:
    """Per operator and number of calls between its name and its trailing argument (the tail
    calls, which the study names as the drift's correlate): recall blocks written, arity errors,
    the rate and its 95% Wilson interval; the call chosen as in ``arity_by_distance``."""
    from opgen import ops

    counts: dict[str, dict[int, list[int]]] = {}
    for r in records:
        for rc in r.get("recalls", ()):
            chosen = [t for _c, t in chosen_calls(r, rc.get("op"), drift_call) if t >= 0]
            for t in sorted(set(chosen)):
                c = counts.setdefault(rc["op"], {}).setdefault(t, [0, 0])
                c[0] += rc.get("verdict") == "arity"
                c[1] += 1
    order = {op_id: i for i, op_id in enumerate(ops.ALL_IDS)}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for op in sorted(counts, key=lambda o: order.get(o, len(order))):
        out[op] = {}
        for t, (a, n) in sorted(counts[op].items()):
            lo, hi = wilson(a, n)
            out[op][str(t)] = {"written": n, "arity": a, "rate": a / n if n else 0.0, "ci_low": lo, "ci_high": hi}
    return out


def scope_of(op_ids: object, library: OperatorLibrary = STUDY) -> str:
    """``id`` when a row calls only the library's train operators, ``ood`` when it calls a held-out
    one, ``""`` when its operators are unknown (a foreign file without ``extra_info.ops``).
    ``library``: the grade's operator library (its split decides the roles)."""
    if not isinstance(op_ids, (list, tuple)) or not op_ids:
        return ""
    held = set(library.heldout_ids)
    return "ood" if any(o in held for o in op_ids) else "id"


def scope_table(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Interplay release's roll-up: accuracy on ID rows (train operators only), OOD rows (a
    held-out operator) and all rows together, each with a 95% Wilson interval."""
    counts = {s: [0, 0] for s in SCOPES}
    for r in records:
        ok = int(r["acc"] >= 1.0)
        for s in (r.get("scope") or "", "total"):
            if s in counts:
                counts[s][0] += ok
                counts[s][1] += 1
    return {s: proportion(c, n) for s, (c, n) in counts.items()}


def program_ops(ground_truth: object) -> tuple[str, ...] | None:
    """The operators a row's program calls, read from its ground truth's program text (each task's
    ``expr``, else the native ``ref_code``'s ``funcname`` function) by parsing it with opgen.expr —
    never by running it. None when there is no program text opgen can parse (then no scope)."""
    import json

    from opgen import expr as X

    try:
        gt = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: no scope
        return None
    if not isinstance(gt, Mapping):
        return None
    seen: dict[str, None] = {}
    try:
        tasks = [t for t in (gt.get("tasks") or []) if isinstance(t, Mapping)]
        if tasks and all(isinstance(t.get("expr"), str) for t in tasks):
            for t in tasks:
                seen.update(dict.fromkeys(X.ops_used(X.parse(t["expr"]))))
        elif isinstance(gt.get("ref_code"), str):
            funcname = gt.get("funcname")
            entry: str = funcname if isinstance(funcname, str) else "main_solution"
            seen.update(dict.fromkeys(X.ops_used(X.parse_program(gt["ref_code"], entry))))
        else:
            return None
    except (X.ExprError, ValueError, TypeError, KeyError):
        return None
    return tuple(seen) or None


ROLES = ("eval", "probe", "train")


def file_role(data: object, records: Sequence[Mapping[str, Any]] = ()) -> dict[str, str]:
    """What a scored data file is, and where that was read: the manifest beside it (the split that
    lists the file: its ``role``; an eval split drawn by a probe generator is ``probe``), else the
    rows (an ``extra_info.condition`` marks probe rows), else ``eval``. Roll-ups (ID/OOD/total)
    are made of ``eval`` files only; probes report per condition."""
    import json
    from pathlib import Path

    path = Path(str(data))
    for man in ((path.parent / "manifest.json", path.parent.parent / "manifest.json") if data is not None else ()):
        try:
            doc = json.loads(man.read_text(encoding="utf-8")) if man.is_file() else None
        except (OSError, ValueError):
            doc = None
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, dict):
            continue
        for name, sec in sorted(splits.items()):
            files = sec.get("files") if isinstance(sec, dict) else None
            if not isinstance(files, list):
                continue
            if any(isinstance(f, dict) and isinstance(f.get("path"), str)
                   and (man.parent / f["path"]).resolve() == path.resolve() for f in files):
                role = str(sec.get("role") or "eval")
                probe = str(sec.get("generator") or "").startswith("probe") or str(sec.get("family") or "").startswith(
                    "probe")
                if role == "eval" and probe:
                    role = "probe"
                return {"role": role, "from": f"{man} (split {name}: role {sec.get('role')!r}, generator "
                                              f"{sec.get('generator')!r})"}
    if any(r.get("condition") for r in records):
        return {"role": "probe", "from": "rows (extra_info.condition is set)"}
    return {"role": "eval", "from": "default (no manifest lists the file, its rows carry no condition)"}


def rollup_by_role(data: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """metrics.json's ``scope``: ID / OOD / total over the scored ``eval`` files of a model only (by
    each file's ``summary.role``), each with the files and rows that made it; probe and train files
    are listed under ``left_out`` with their role (probes report per condition in their summary)."""
    counts = {s: [0, 0] for s in SCOPES}
    files: dict[str, dict[str, int]] = {s: {} for s in SCOPES}
    left_out: dict[str, str] = {}
    for dn, entry in sorted(data.items()):
        summary = entry.get("summary") if isinstance(entry, Mapping) else None
        if not summary:
            continue
        role = (summary.get("role") or {}).get("role", "eval")
        if role != "eval":
            left_out[dn] = role
            continue
        table = summary.get("by_scope") or {}
        for s in SCOPES:
            p = table.get(s)
            if p and p.get("n"):
                counts[s][0] += int(p["correct"])
                counts[s][1] += int(p["n"])
                files[s][dn] = int(p["n"])
    out: dict[str, dict[str, Any]] = {s: {**proportion(c, n), "files": files[s]} for s, (c, n) in counts.items()}
    out["left_out"] = left_out
    return out


def merge_scopes(tables: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Scope tables of several files summed into one (counts added, intervals recomputed)."""
    counts = {s: [0, 0] for s in SCOPES}
    for t in tables:
        for s in SCOPES:
            p = t.get(s) if t else None
            if p:
                counts[s][0] += int(p["correct"])
                counts[s][1] += int(p["n"])
    return {s: proportion(c, n) for s, (c, n) in counts.items()}


def _sort_key(label: str) -> tuple[tuple[int, int, str], ...]:
    # Numeric parts sort numerically (depth 10 after depth 9), text parts as text.
    return tuple((0, int(p), "") if p.lstrip("-").isdigit() else (1, 0, p) for p in label.split("|"))


def pass_at_k_earliest(correct: Sequence[bool], k: int) -> float:
    """The Interplay release's pass@k: 1 when one of the first k samples (generation order) is correct."""
    if k > len(correct):
        raise ValueError(f"pass@{k} needs at least {k} samples, got {len(correct)}")
    return 1.0 if any(correct[:k]) else 0.0


def pass_at_k_table(correct_by_row: Mapping[int, Sequence[bool]], estimator: str = "unbiased") -> dict[str, float]:
    """Mean pass@k over rows (``estimator``: unbiased or earliest), for every k up to the smallest
    sample count; each row's samples in generation order."""
    if estimator not in PASS_K_ESTIMATORS:
        raise ValueError(f"unknown pass@k estimator {estimator!r} (known: {', '.join(PASS_K_ESTIMATORS)})")
    if not correct_by_row:
        return {}
    n_min = min(len(v) for v in correct_by_row.values())
    out = {}
    for k in ks_for(n_min):
        vals = [pass_at_k(len(v), sum(v), k) if estimator == "unbiased" else pass_at_k_earliest(v, k)
                for v in correct_by_row.values()]
        out[f"pass@{k}"] = sum(vals) / len(vals)
    return out


def recall_tables(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-operator recall accuracy, chimera confusion and arity-error rates over all recall blocks.

    Accuracy counts a missing block as a failure (the operator was needed and not recalled);
    the arity-error rate is over the blocks written for that operator.
    """
    per_op: dict[str, dict[str, int]] = {}
    confusion: dict[str, dict[str, int]] = {}
    for r in records:
        for rc in r.get("recalls", ()):
            d = per_op.setdefault(rc["op"], {"needed": 0, "written": 0, "correct": 0, "arity": 0, "chimera": 0,
                                             "wrong_body": 0, "missing": 0})
            d["needed"] += 1
            d["written"] += 1
            d["correct"] += rc["verdict"] == "correct"
            d["arity"] += rc["verdict"] == "arity"
            d["chimera"] += rc["verdict"] == "chimera"
            d["wrong_body"] += rc["verdict"] in ("wrong_body", "no_definition", "syntax")
            if rc["verdict"] == "chimera":
                row = confusion.setdefault(rc["op"], {})
                row[rc["chimera_of"]] = row.get(rc["chimera_of"], 0) + 1
        for op in r.get("missing", ()):
            d = per_op.setdefault(op, {"needed": 0, "written": 0, "correct": 0, "arity": 0, "chimera": 0,
                                       "wrong_body": 0, "missing": 0})
            d["needed"] += 1
            d["missing"] += 1
    from opgen import ops

    order = {op_id: i for i, op_id in enumerate(ops.ALL_IDS)}
    recall = {}
    for op in sorted(per_op, key=lambda o: order.get(o, len(order))):
        d = per_op[op]
        recall[op] = {**d, **{k: v for k, v in proportion(d["correct"], d["needed"]).items() if k != "n"},
                      "arity_rate": d["arity"] / d["written"] if d["written"] else 0.0}
    confusion = {op: dict(sorted(row.items(), key=lambda kv: order.get(kv[0], 99)))
                 for op, row in sorted(confusion.items(), key=lambda kv: order.get(kv[0], 99))}
    return {"recall_by_op": recall, "chimera_confusion": confusion}


DEFAULT_DEFS = MetricDefs()  # the study's definitions: farthest call, unbiased pass@k
