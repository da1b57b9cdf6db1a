"""Numbers of a paper from graded responses: intervals, pass@k, recall diagnostics, from running counters.

Every table of ``summary.json`` is kept as counters that one row's records at a time are added to
(:class:`Summary`): memory does not grow with the number of responses, the order rows arrive in
does not change a figure (chunks graded out of order give the local scorer's summary), and a
table that counted nothing is ``null``, never 0.

Intervals are by row (docs/scoring.md, "Intervals"): a row's samples are not independent draws, so
every proportion keeps, beside its counts, the sums over rows that a cluster-robust variance needs
(:class:`Tally`), and its default 95% interval is Wilson's at the effective sample size those give;
with one unit per row that is the per-sample Wilson interval itself (``--interval samples`` asks
for it everywhere).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from opgen import expr, ops

# their home is the CLI's choices; re-exported
from opgen.choices import DRIFT_CALLS, INTERVALS, PASS_K_ESTIMATORS
from opgen.ops import STUDY, OperatorLibrary
from opgen.score.judge import ERRORS

Z95 = 1.959963984540054


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (sensible at 0, 1 and small n). ``n`` may
    be an effective sample size (not a whole number); ``successes`` is then ``p * n``."""
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


class Tally:
    """A proportion over units (responses, recall blocks) that come in clusters: a row's. Beside the
    counts ``n`` and ``correct`` it keeps ``rows`` and the sums over rows of c², c·n and n² (c, n: a
    row's correct units and units), from which the cluster-robust variance of the proportion follows
    exactly (integers; no order, no rounding). A row of one unit adds to those sums what it adds to
    ``correct`` and ``n``: only the excess of larger rows is kept (``_cc``, ``_cn``, ``_nn``), so the
    common row costs three additions."""

    __slots__ = ("n", "correct", "rows", "_cc", "_cn", "_nn")

    def __init__(self) -> None:
        self.n = self.correct = self.rows = self._cc = self._cn = self._nn = 0

    def add(self, n: int, correct: int) -> None:
        """One row's ``n`` units, ``correct`` of them correct."""
        self.n += n
        self.correct += correct
        self.rows += 1
        if n != 1:
            self._cc += correct * correct - correct
            self._cn += correct * n - correct
            self._nn += n * n - n

    @property
    def cc(self) -> int:
        return self._cc + self.correct

    @property
    def cn(self) -> int:
        return self._cn + self.correct

    @property
    def nn(self) -> int:
        return self._nn + self.n

    def merge(self, other: Tally) -> None:
        for k in Tally.__slots__:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    @property
    def clustered(self) -> bool:
        """Some row holds more than one unit (else rows == n and every interval is per unit)."""
        return self.nn > self.n

    def n_eff(self) -> float:
        """The effective sample size: n over the design effect of the clustering, within [rows, n].
        With every row's proportion the same (0 or 1 everywhere included) the variance between rows
        says nothing: the conservative bound, one unit per row, is used."""
        n, c, rows = self.n, self.correct, self.rows
        if not self.clustered:
            return float(n)
        if rows < 2 or c in (0, n):
            return float(rows)
        # sum over rows of (c_i - p n_i)^2, times n^2: an integer
        ss = self.cc * n * n - 2 * c * self.cn * n + c * c * self.nn
        if ss <= 0:
            return float(n)
        # p (1 - p) / var, var = rows / (rows - 1) * ss / n^4
        eff = Fraction(c * (n - c) * n * n * (rows - 1), rows * ss)
        return float(min(max(eff, Fraction(rows)), Fraction(n)))

    def interval(self, how: str = "rows") -> tuple[float, float] | tuple[None, None]:
        if self.n == 0:
            return (None, None)
        if how == "samples" or not self.clustered:
            return wilson(self.correct, self.n)
        eff = self.n_eff()
        return wilson(self.correct * eff / self.n if self.correct not in (0, self.n) else
                      (0.0 if self.correct == 0 else eff), eff)

    def prop(self, how: str = "rows") -> dict[str, Any]:
        """``{n, correct, acc, ci_low, ci_high}`` (acc and the interval null when n is 0); a clustered
        tally adds ``by_row`` (its row count and sums: what a roll-up over files adds up)."""
        lo, hi = self.interval(how)
        out: dict[str, Any] = {"n": self.n, "correct": self.correct, "acc": self.correct / self.n if self.n else None,
                               "ci_low": lo, "ci_high": hi}
        if self.clustered:
            out["by_row"] = {"rows": self.rows, "cc": self.cc, "cn": self.cn, "nn": self.nn}
        return out

    @classmethod
    def of(cls, prop: Mapping[str, Any] | None, n_key: str = "n", c_key: str = "correct") -> Tally:
        """The tally a proportion of a summary was made from (one unit per row when it has no ``by_row``)."""
        t = cls()
        if not prop:
            return t
        t.n, t.correct = int(prop.get(n_key) or 0), int(prop.get(c_key) or 0)
        rows = prop.get("by_row")
        t.rows = int(rows["rows"]) if isinstance(rows, Mapping) else t.n
        if isinstance(rows, Mapping):
            t._cc, t._cn, t._nn = int(rows["cc"]) - t.correct, int(rows["cn"]) - t.correct, int(rows["nn"]) - t.n
        return t


def proportion(successes: int, n: int, how: str = "rows") -> dict[str, Any]:
    """A proportion of ``n`` independent units (one per row): counts, acc and its Wilson interval;
    acc and the interval are null when ``n`` is 0."""
    t = Tally()
    t.n, t.correct, t.rows = n, successes, n
    return t.prop(how)


def combine(props: Iterable[Mapping[str, Any] | None], how: str = "rows") -> dict[str, Any]:
    """Proportions of disjoint rows (several files) added up, the interval computed anew."""
    total = Tally()
    for p in props:
        total.merge(Tally.of(p))
    return total.prop(how)


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


MEASURED_FIELDS = ("unchanged_calls", "output_is_input", "call_ops", "call_chars", "call_tails")  # row_measures'


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
    tail-call) bucket when a row calls it several times; ``pass_k`` — the pass@k estimator;
    ``interval`` — the 95% intervals by row (a row's samples clustered) or per sample."""

    drift_call: str = "farthest"
    pass_k: str = "unbiased"
    interval: str = "rows"

    def __post_init__(self) -> None:
        if self.drift_call not in DRIFT_CALLS:
            raise ValueError(f"unknown drift call {self.drift_call!r} (known: {', '.join(DRIFT_CALLS)})")
        if self.pass_k not in PASS_K_ESTIMATORS:
            raise ValueError(f"unknown pass@k estimator {self.pass_k!r} (known: {', '.join(PASS_K_ESTIMATORS)})")
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown interval {self.interval!r} (known: {', '.join(INTERVALS)})")

    def describe(self) -> dict[str, str]:
        return {"drift_call": self.drift_call, "pass_at_k": self.pass_k,
                "pass_at_k_estimator": PASS_K_ESTIMATORS[self.pass_k], "interval": self.interval,
                "interval_method": INTERVALS[self.interval]}


def interval_of(summary: Mapping[str, Any] | None) -> str:
    """The interval a summary's figures were made with (per sample before intervals by row existed)."""
    defs = (summary or {}).get("metric_definitions") or {}
    how = defs.get("interval")
    return how if how in INTERVALS else "samples"


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


# diagnose.py's detail of an ``arity`` verdict: "takes LO..HI parameters, OP takes N"
_ARITY_DETAIL = re.compile(r"takes (\d+)\.\.(\d+) parameters, \S+ takes (\d+)\Z")


def arity_direction(recall: Mapping[str, Any]) -> str | None:
    """``dropped`` (the definition takes fewer parameters than the operator: the study's arity
    error, "drops the second parameter"), ``added`` (it requires more), or None for any verdict but
    ``arity``."""
    if recall.get("verdict") != "arity":
        return None
    m = _ARITY_DETAIL.match(str(recall.get("detail") or ""))
    if m is None:  # a verdict from before the direction was told: read as the study's error
        return "dropped"
    lo, _hi, arity = (int(g) for g in m.groups())
    return "added" if lo > arity else "dropped"


def scope_of(op_ids: object, library: OperatorLibrary = STUDY) -> str:
    """``id`` when a row calls only the library's train operators, ``ood`` when it calls a held-out
    one, ``""`` when its operators are unknown (a foreign file without ``extra_info.ops``).
    ``library``: the grade's operator library (its split decides the roles)."""
    if not isinstance(op_ids, (list, tuple)) or not op_ids:
        return ""
    held = _STUDY_HELD if library is STUDY else frozenset(library.heldout_ids)
    return "ood" if not held.isdisjoint(op_ids) else "id"


_STUDY_HELD = frozenset(ops.HELDOUT_IDS)


def program_ops(ground_truth: object) -> tuple[str, ...] | None:
    """The operators a row's program calls, read from its ground truth's program text (each task's
    ``expr``, else the native ``ref_code``'s ``funcname`` function) by parsing it with opgen.expr —
    never by running it. None when there is no program text opgen can parse (then no scope)."""
    import json

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
                seen.update(dict.fromkeys(expr.ops_used(expr.parse(t["expr"]))))
        elif isinstance(gt.get("ref_code"), str):
            funcname = gt.get("funcname")
            entry: str = funcname if isinstance(funcname, str) else "main_solution"
            seen.update(dict.fromkeys(expr.ops_used(expr.parse_program(gt["ref_code"], entry))))
        else:
            return None
    except (expr.ExprError, ValueError, TypeError, KeyError):
        return None
    return tuple(seen) or None


ROLES = ("eval", "probe", "train")


def file_role(data: object, probe_rows: bool = False) -> dict[str, str]:
    """What a scored data file is, and where that was read: the manifest beside it (the split that
    lists the file: its ``role``; an eval split drawn by a probe generator is ``probe``), else the
    rows (``probe_rows``: an ``extra_info.condition`` marks probe rows), else ``eval``. Roll-ups
    (ID/OOD/total) are made of ``eval`` files only; probes report per condition."""
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
    if probe_rows:
        return {"role": "probe", "from": "rows (extra_info.condition is set)"}
    return {"role": "eval", "from": "default (no manifest lists the file, its rows carry no condition)"}


def rollup_by_role(data: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """metrics.json's ``scope``: ID / OOD / total over the scored ``eval`` files of a model only (by
    each file's ``summary.role``), each with the files and rows that made it; probe and train files
    are listed under ``left_out`` with their role (probes report per condition in their summary)."""
    tables: dict[str, list[Mapping[str, Any]]] = {s: [] for s in SCOPES}
    files: dict[str, dict[str, int]] = {s: {} for s in SCOPES}
    left_out: dict[str, str] = {}
    how = "rows"
    for dn, entry in sorted(data.items()):
        summary = entry.get("summary") if isinstance(entry, Mapping) else None
        if not summary:
            continue
        role = (summary.get("role") or {}).get("role", "eval")
        if role != "eval":
            left_out[dn] = role
            continue
        how = interval_of(summary)
        table = summary.get("by_scope") or {}
        for s in SCOPES:
            p = table.get(s)
            if p and p.get("n"):
                tables[s].append(p)
                files[s][dn] = int(p["n"])
    out: dict[str, dict[str, Any]] = {s: {**combine(tables[s], how), "files": files[s]} for s in SCOPES}
    out["left_out"] = left_out
    return out


def _sort_key(label: str) -> tuple[tuple[int, int, str], ...]:
    # Numeric parts sort numerically (depth 10 after depth 9), text parts as text.
    return tuple((0, int(p), "") if p.lstrip("-").isdigit() else (1, 0, p) for p in label.split("|"))


def pass_at_k_earliest(correct: Sequence[bool], k: int) -> float:
    """The Interplay release's pass@k: 1 when one of the first k samples (generation order) is correct."""
    if k > len(correct):
        raise ValueError(f"pass@{k} needs at least {k} samples, got {len(correct)}")
    return 1.0 if any(correct[:k]) else 0.0


def _pass_at_k_exact(n: int, c: int, k: int) -> Fraction:
    return Fraction(1) - Fraction(math.comb(n - c, k), math.comb(n, k))


def pass_at_k_rows(kinds: Mapping[tuple[int, int], int], estimator: str = "unbiased") -> dict[str, float]:
    """Mean pass@k over rows for every k up to the smallest sample count, from ``kinds``: how many rows
    had (n samples, c) — c the correct ones (unbiased), or the position of the first correct sample,
    n when none is (earliest). The mean is exact (then rounded once), whatever the rows' order."""
    if estimator not in PASS_K_ESTIMATORS:
        raise ValueError(f"unknown pass@k estimator {estimator!r} (known: {', '.join(PASS_K_ESTIMATORS)})")
    if not kinds:
        return {}
    rows = sum(kinds.values())
    n_min = min(n for n, _ in kinds)
    out = {}
    for k in ks_for(n_min):
        if estimator == "unbiased":
            total = sum((count * _pass_at_k_exact(n, c, k) for (n, c), count in kinds.items()), Fraction(0))
        else:
            total = Fraction(sum(count for (_n, first), count in kinds.items() if first < k))
        out[f"pass@{k}"] = float(total / rows)
    return out


def pass_at_k_table(correct_by_row: Mapping[int, Sequence[bool]], estimator: str = "unbiased") -> dict[str, float]:
    """Mean pass@k over rows (``estimator``: unbiased or earliest), for every k up to the smallest
    sample count; each row's samples in generation order."""
    kinds: Counter[tuple[int, int]] = Counter()
    for v in correct_by_row.values():
        kinds[(len(v), sum(v) if estimator == "unbiased" else next((i for i, ok in enumerate(v) if ok), len(v)))] += 1
    return pass_at_k_rows(kinds, estimator)


_RECALL_COUNTS = ("needed", "written", "correct", "arity", "chimera", "wrong_body", "missing")
# the count a recall verdict adds to (besides needed and written; correct and missing_import aside)
_VERDICT_COUNTS = {"arity": "arity", "chimera": "chimera", "wrong_body": "wrong_body", "no_definition": "wrong_body",
                   "syntax": "wrong_body"}


def _tally(table: dict[str, Tally], key: str) -> Tally:
    t = table.get(key)
    if t is None:
        t = table[key] = Tally()
    return t


def _op_order(op: str, order: Mapping[str, int]) -> int:
    return order.get(op, len(order))


class Summary:
    """Every roll-up of ``summary.json`` from running counters. Fed one row's records at a time
    (:meth:`add_row`: every sample of the row, in sample order); a row's fields (split, depth,
    scope, degeneracy, its operators' calls) are its first record's. Rows may come in any order."""

    GROUPS = ("by_split", "by_depth", "by_k", "by_condition", "by_split_depth")  # row fields, "|"-joined

    def __init__(self, defs: MetricDefs | None = None, edges: Sequence[int] = DISTANCE_EDGES):
        self.defs = defs or MetricDefs()
        self.edges = tuple(edges)
        self.labels = bucket_labels(self.edges)
        self.responses = self.rows = 0
        self.samples_min: int | None = None
        self.samples_max = 0
        self.tally: dict[str, Tally] = {k: Tally() for k in ("overall", "format_ok", "structure_ok",
                                                              "non_degenerate", "output_changed")}
        self.groups: dict[str, dict[str, Tally]] = {g: {} for g in self.GROUPS}
        self.scopes = {s: Tally() for s in SCOPES}
        self.scores: Counter[float] = Counter()
        self.degenerate = 0
        self.pass_kinds: Counter[tuple[int, int]] = Counter()
        self.errors: Counter[str] = Counter()
        self.scope_from: Counter[str] = Counter()
        self.probe_rows = False
        self.recall: dict[str, dict[str, int]] = {}
        self.recall_acc: dict[str, Tally] = {}
        self.recall_arity: dict[str, Tally] = {}
        self.confusion: dict[str, Counter[str]] = {}
        self.by_distance: dict[str, dict[str, list[Tally]]] = {}
        self.by_tails: dict[str, dict[int, list[Tally]]] = {}
        self.programs = self.missing_import = self.missing_import_blocks = 0
        self.retries = 0

    # ---------------------------------------------------------------- feeding

    def add_row(self, recs: Sequence[Mapping[str, Any]]) -> None:
        if not recs:
            return
        first = recs[0]
        n = len(recs)
        self.rows += 1
        self.responses += n
        self.samples_min = n if self.samples_min is None else min(self.samples_min, n)
        self.samples_max = max(self.samples_max, n)
        oks = [r["acc"] >= 1.0 for r in recs]
        c = sum(oks)
        t = self.tally
        t["overall"].add(n, c)
        t["format_ok"].add(n, sum(bool(r["format_ok"]) for r in recs))
        structured = [r.get("structure_ok") for r in recs if r.get("structure_ok") is not None]
        if structured:
            t["structure_ok"].add(len(structured), sum(bool(s) for s in structured))
        split, depth = str(first.get("split", "")), str(first.get("depth", ""))
        for name, label in (("by_split", split), ("by_depth", depth), ("by_k", str(first.get("k", ""))),
                            ("by_condition", str(first.get("condition", ""))), ("by_split_depth", f"{split}|{depth}")):
            _tally(self.groups[name], label).add(n, c)
        scope = first.get("scope") or ""
        if scope in ("id", "ood"):
            self.scopes[scope].add(n, c)
        self.scopes["total"].add(n, c)
        if first.get("degenerate") is False:
            t["non_degenerate"].add(n, c)
        elif first.get("degenerate") is True:
            self.degenerate += n
        if first.get("output_is_input") is False:
            t["output_changed"].add(n, c)
        if first.get("condition"):
            self.probe_rows = True
        self.pass_kinds[(n, c if self.defs.pass_k == "unbiased" else next((i for i, ok in enumerate(oks) if ok), n))] \
            += 1
        for r in recs:  # per response: what a grade says of itself (a counter of a new grade field goes here)
            self.scores[r["score"]] += 1
            self.errors[r["error"]] += 1
            self.scope_from[str(r.get("scope_from"))] += 1
            self.retries += r.get("retries", 0)
            if r.get("mode") == "program":
                self.programs += 1
                self.missing_import += r.get("error") == "missing_import"
        self._add_recalls(first, recs)

    def _add_recalls(self, first: Mapping[str, Any], recs: Sequence[Mapping[str, Any]]) -> None:
        seen, arity, missing = self._row_recalls(recs)
        if not seen and not missing:
            return
        per_op: dict[str, list[int]] = {}  # written, correct, dropped, added
        for (op, verdict), k in seen.items():
            d = self._recall_counts(op)
            d["needed"] += k
            d["written"] += k
            w = per_op.get(op)
            if w is None:
                w = per_op[op] = [0, 0, 0, 0]
            w[0] += k
            if verdict == "correct":
                d["correct"] += k
                w[1] += k
            elif verdict in _VERDICT_COUNTS:
                d[_VERDICT_COUNTS[verdict]] += k
            elif verdict == "missing_import":
                self.missing_import_blocks += k
        for (op, direction), k in arity.items():
            self.recall[op]["arity_" + direction] += k
            per_op[op][2 if direction == "dropped" else 3] += k
        for op, k in missing.items():
            d = self._recall_counts(op)
            d["needed"] += k
            d["missing"] += k
        for op in per_op.keys() | missing.keys():
            written, ok, dropped, added = per_op.get(op) or (0, 0, 0, 0)
            _tally(self.recall_acc, op).add(written + missing.get(op, 0), ok)
            if written:
                _tally(self.recall_arity, op).add(written, dropped)
                self._add_drift(first, op, written, dropped, added)

    def _row_recalls(self, recs: Sequence[Mapping[str, Any]]) -> \
            tuple[dict[tuple[str, str], int], dict[tuple[str, str], int], dict[str, int]]:
        """A row's recall blocks by (operator, verdict), its arity errors by (operator, direction),
        its missing recalls by operator (the chimeras go straight into the confusion table). Plain
        dicts: a Counter's += on a new key is a Python call (its __missing__), and this runs per block."""
        seen: dict[tuple[str, str], int] = {}
        arity: dict[tuple[str, str], int] = {}
        missing: dict[str, int] = {}
        for r in recs:
            for rc in r.get("recalls") or ():
                key = (rc["op"], rc["verdict"])
                seen[key] = seen.get(key, 0) + 1
                if key[1] == "arity":
                    which = (key[0], arity_direction(rc) or "dropped")
                    arity[which] = arity.get(which, 0) + 1
                elif key[1] == "chimera":
                    self.confusion.setdefault(key[0], Counter())[rc["chimera_of"]] += 1
            for op in r.get("missing") or ():
                missing[op] = missing.get(op, 0) + 1
        return seen, arity, missing

    def _add_drift(self, first: Mapping[str, Any], op: str, written: int, dropped: int, added: int) -> None:
        """A row's ``written`` blocks of ``op`` in the buckets of distance and tail calls of its chosen calls."""
        calls = chosen_calls(first, op, self.defs.drift_call)
        if not calls:
            return
        per = self.by_distance.get(op)
        if per is None:
            per = self.by_distance[op] = {label: [Tally(), Tally()] for label in self.labels}
        for b in {self._bucket(chars) for chars, _t in calls}:
            per[b][0].add(written, dropped)
            per[b][1].add(written, added)
        for tc in {tc for _c, tc in calls if tc >= 0}:
            tails = self.by_tails.setdefault(op, {})
            pair = tails.get(tc)
            if pair is None:
                pair = tails[tc] = [Tally(), Tally()]
            pair[0].add(written, dropped)
            pair[1].add(written, added)

    def _bucket(self, chars: int) -> str:
        return self.labels[bisect.bisect_right(self.edges, chars)]

    def _recall_counts(self, op: str) -> dict[str, int]:
        d = self.recall.get(op)
        if d is None:
            d = self.recall[op] = {k: 0 for k in _RECALL_COUNTS}
            d["arity_dropped"] = d["arity_added"] = 0
        return d

    # ---------------------------------------------------------------- reading

    def result(self, n_rows: int, answered: int) -> dict[str, Any]:
        """The summary (``summary.json``'s tables, in its order) of everything added so far."""
        how = self.defs.interval
        t = self.tally
        order = {op_id: i for i, op_id in enumerate(ops.ALL_IDS)}
        mean = sum((Fraction(v) * k for v, k in self.scores.items()), Fraction(0))
        summary: dict[str, Any] = {
            "rows": n_rows, "rows_answered": answered, "rows_without_response": n_rows - answered,
            "responses": self.responses,
            "samples_per_row": {"min": self.samples_min or 0, "max": self.samples_max},
            "overall": t["overall"].prop(how),
            "mean_score": float(mean / self.responses) if self.responses else None,
            "format_ok": t["format_ok"].prop(how),
            "structure_ok": t["structure_ok"].prop(how),
            **{name: {label: g.prop(how) for label, g in sorted(self.groups[name].items(),
                                                                 key=lambda kv: _sort_key(kv[0]))}
               for name in self.GROUPS},
            "by_scope": {s: self.scopes[s].prop(how) for s in SCOPES},
            # rows where no call leaves its argument unchanged and the output is not the input
            "non_degenerate": t["non_degenerate"].prop(how),
            "degenerate_rows": self.degenerate,
            # the weaker condition: only rows whose output is their input excluded (return x scores there)
            "output_changed": t["output_changed"].prop(how),
            "distance_edges": list(self.edges),
            "metric_definitions": self.defs.describe(),
            "arity_by_distance": {op: {b: _arity_entry(self.by_distance[op][b], how) for b in self.labels}
                                  for op in sorted(self.by_distance, key=lambda o: _op_order(o, order))},
            "arity_by_tail_calls": {op: {str(tc): _arity_entry(pair, how)
                                         for tc, pair in sorted(self.by_tails[op].items())}
                                    for op in sorted(self.by_tails, key=lambda o: _op_order(o, order))},
            "pass_at_k": pass_at_k_rows(self.pass_kinds, self.defs.pass_k) if self.samples_max > 1 else {},
            "errors": {e: self.errors[e] for e in ERRORS if self.errors.get(e)},
            # responses graded again after the grading process or sandbox worker under them died (grades' ``retries``)
            "retries": self.retries,
        }
        summary["role"] = file_role(None, self.probe_rows)  # from the rows; the report adds the manifest's
        summary["scope_from"] = dict(sorted(self.scope_from.items()))
        recall = {}
        for op in sorted(self.recall, key=lambda o: _op_order(o, order)):
            d = self.recall[op]
            acc = self.recall_acc[op].prop(how)
            arity = self.recall_arity.get(op, Tally())
            recall[op] = {**{k: d[k] for k in _RECALL_COUNTS},
                          **{k: v for k, v in acc.items() if k not in ("n", "by_row")},
                          # the study's arity error: blocks written that drop a parameter (its
                          # interval in arity_ci); blocks that require one more are arity_added
                          "arity_rate": d["arity_dropped"] / d["written"] if d["written"] else None,
                          "arity_dropped": d["arity_dropped"], "arity_added": d["arity_added"],
                          "arity_added_rate": d["arity_added"] / d["written"] if d["written"] else None,
                          "arity_ci": list(arity.interval(how))}
        summary["recall_by_op"] = recall
        summary["chimera_confusion"] = {
            op: dict(sorted(row.items(), key=lambda kv: order.get(kv[0], 99)))
            for op, row in sorted(self.confusion.items(), key=lambda kv: order.get(kv[0], 99))}
        summary["missing_import"] = {"programs": self.programs, "responses": self.missing_import,
                                     "rate": self.missing_import / self.programs if self.programs else None,
                                     "recall_blocks": self.missing_import_blocks}
        return summary

    @classmethod
    def of(cls, records: Iterable[Mapping[str, Any]], defs: MetricDefs | None = None,
           edges: Sequence[int] = DISTANCE_EDGES) -> Summary:
        """A summary of records in row order (consecutive records of one ``index`` are one row's)."""
        out = cls(defs, edges)
        row: list[Mapping[str, Any]] = []
        for r in records:
            if row and r.get("index") != row[0].get("index"):
                out.add_row(row)
                row = []
            row.append(r)
        out.add_row(row)
        return out


def _arity_entry(pair: Sequence[Tally], how: str) -> dict[str, Any]:
    """One cell of an arity table: recall blocks written, those that drop a parameter (``arity``, the
    study's error: its ``rate`` and interval) and those that add one (``added``)."""
    dropped, added = pair
    lo, hi = dropped.interval(how)
    n = dropped.n
    out: dict[str, Any] = {"written": n, "arity": dropped.correct, "rate": dropped.correct / n if n else None,
                           "ci_low": lo,
           "ci_high": hi, "added": added.correct, "added_rate": added.correct / n if n else None}
    if dropped.clustered:
        out["by_row"] = {"rows": dropped.rows, "cc": dropped.cc, "cn": dropped.cn, "nn": dropped.nn}
    return out


def combine_arity(tables: Iterable[Mapping[str, Mapping[str, Mapping[str, Any]]] | None],
                  how: str = "rows") -> dict[str, dict[str, dict[str, Any]]]:
    """Arity tables (``arity_by_distance`` or ``arity_by_tail_calls``) of disjoint rows added up."""
    cells: dict[str, dict[str, list[Tally]]] = {}
    for table in tables:
        for op, buckets in (table or {}).items():
            for b, d in buckets.items():
                pair = cells.setdefault(op, {}).setdefault(b, [Tally(), Tally()])
                pair[0].merge(Tally.of(d, "written", "arity"))
                added = Tally()
                added.n, added.correct = int(d.get("written") or 0), int(d.get("added") or 0)
                pair[1].merge(added)
    order = {op_id: i for i, op_id in enumerate(ops.ALL_IDS)}

    def keys(op: str) -> list[str]:  # tail-call counts numerically; distance buckets as the tables list them
        found = list(cells[op])
        return sorted(found, key=_sort_key) if all(b.isdigit() for b in found) else found

    return {op: {b: _arity_entry(cells[op][b], how) for b in keys(op)}
            for op in sorted(cells, key=lambda o: _op_order(o, order))}


DEFAULT_DEFS = MetricDefs()  # the study's definitions: farthest call, unbiased pass@k, intervals by row
