"""The leakage report: train and eval splits of one build must not share programs or prompts, and
the study's held-out operators must never be composed in a train split.

Inputs are per-row 64-bit keys the builder collected (blake2b of the canonical expression of every
task, and of the prompt text), so the check is a set-membership test and needs no file read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen import truth
from opgen.errors import OpgenError
from opgen.library import library_of_rows
from opgen.ops import STUDY, OperatorLibrary
from opgen.truth import GroundTruthError

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


def check(splits: list[SplitKeys], heldout_ops: tuple[str, ...], allow: tuple[str, ...],
          library: OperatorLibrary = STUDY) -> dict:
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
        mask |= 1 << library.position[op_id]  # an operator's bit: its position in the library
    if mask:
        for tr in train:
            rows = np.flatnonzero(tr.composed & np.array(mask, dtype=tr.composed.dtype))
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
# rule to files of separate builds, read back from parquet. Violations:
#
#   prompt            an eval prompt (its user turn) is a training prompt
#   task              an eval task (program and input) is a training task
#   heldout_program   an eval composition (depth 2 or more) holding a held-out operator occurs in training
#   heldout_composed  a training task composes a held-out operator (any task of depth > 1, a single
#                     call on a composed argument such as ``func_9((x + x))`` included)
#
# and, as information (no violation): the share of each eval file's programs, per depth, that also
# occur in training (``program_share``; train-operator programs recur in ID evals as in the study,
# single calls everywhere: the held-out atomic skills are trained). Builds of opgen 0.3 and later
# meet the rule by construction (opgen.rng.input_side); this check is the independent confirmation.


class LeakageInputError(ValueError, OpgenError):
    """A path that is not a readable build folder or parquet file of rows; the message names it."""

    exit_code = 1


@dataclass
class FileKeys:
    path: str
    rows: int
    prompt: np.ndarray  # uint64 per row: the user turn's text
    task: np.ndarray  # uint64 per task: program NUL input
    task_rows: np.ndarray
    program: np.ndarray  # uint64 per task: the program
    program_rows: np.ndarray
    program_depth: np.ndarray  # int64 per task: its depth (compositions: 2 or more)
    program_heldout: np.ndarray  # bool per task: it calls a held-out operator
    heldout_composed: np.ndarray  # row indices whose composed tasks use a held-out operator


def _files_of_role(folder, role: str) -> list | None:
    """The files of ``folder``'s splits of ``role``, by its ``manifest.json`` (None without one): a
    training cell's build may hold an eval split (native-stage2's test split), which is no
    training data, and an eval build's train split is none of the eval files."""
    import json

    try:
        man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        splits = man["splits"]
        return sorted(folder / f["path"] for s in splits.values() if s.get("role") == role for f in s["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parquet_files(paths, role: str | None = None) -> list:
    """Build folders and files, in the order given. A folder with a ``manifest.json`` gives the files
    of its splits of ``role`` (all splits without ``role``); another folder every ``*.parquet``
    below it, sorted."""
    from pathlib import Path

    out = []
    for p in map(Path, paths):
        if p.is_dir():
            by_role = _files_of_role(p, role) if role is not None else None
            if by_role is not None:
                if not by_role:
                    raise LeakageInputError(f"{p}: this build holds no {role} split (its manifest.json); give its "
                                            f"parquet files to check them as {role} files")
                out.extend(by_role)
                continue
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


_OP_NAME = None


def _ops_in(expr: str) -> list[str]:
    global _OP_NAME
    if _OP_NAME is None:
        import re

        _OP_NAME = re.compile(r"\bfunc_[0-9]+\b")
    return _OP_NAME.findall(expr)


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
    prompts, tasks, task_rows, progs, prog_rows, depths, held_progs, composed = [], [], [], [], [], [], [], []
    for i, (msgs, rm) in enumerate(zip(table.column("prompt").to_pylist(), table.column("reward_model").to_pylist())):
        text = "\x00".join(str(m.get("content", "")) for m in (msgs or []) if m.get("role") == "user")
        prompts.append(h64(text))
        try:
            gt = truth.read((rm or {}).get("ground_truth") or "{}", f"{path}: row {i}: reward_model.ground_truth")
        except GroundTruthError as exc:
            raise LeakageInputError(str(exc)) from None
        listed = gt.get("tasks")
        if not isinstance(listed, list):  # a native row: its whole program and input, depth by its calls
            code = str(gt.get("ref_code", ""))
            listed = [{"expr": code, "input": json.dumps(gt.get("ref_input"), sort_keys=True),
                       "ops": sorted(set(_ops_in(code))), "depth": max(1, _n_calls(code))}]
        hit = False
        for t in listed:
            if not isinstance(t, dict):
                raise LeakageInputError(f"{path}: row {i}: ground_truth.tasks holds a non-object")
            expr, x = str(t.get("expr", "")), t.get("input", "")
            x = x if isinstance(x, str) else json.dumps(x, sort_keys=True)
            tasks.append(h64(f"{expr}\x00{x}"))
            task_rows.append(i)
            depth = t.get("depth", 1)
            depth = depth if isinstance(depth, int) and not isinstance(depth, bool) else max(1, _n_calls(expr))
            # the operators the program calls, read from its text (the listed ``ops`` may be absent)
            uses_held = any(o in held for o in (t.get("ops") or _ops_in(expr)))
            progs.append(h64(expr))
            prog_rows.append(i)
            depths.append(depth)
            held_progs.append(uses_held)
            if depth > 1 and uses_held:
                hit = True
        if hit:
            composed.append(i)
    u64 = np.uint64
    return FileKeys(str(path), table.num_rows, np.array(prompts, dtype=u64), np.array(tasks, dtype=u64),
                    np.array(task_rows, dtype=np.int64), np.array(progs, dtype=u64),
                    np.array(prog_rows, dtype=np.int64), np.array(depths, dtype=np.int64),
                    np.array(held_progs, dtype=bool), np.array(composed, dtype=np.int64))


def _hits(values: np.ndarray, rows: np.ndarray | None, pool: np.ndarray) -> tuple[int, list[int]]:
    hit = member(values, pool)
    if not hit.any():
        return 0, []
    found = np.unique(rows[hit]) if rows is not None else np.flatnonzero(hit)
    return int(found.size), found[:_EXAMPLES].tolist()


def program_share(ev: FileKeys, pool: np.ndarray) -> dict[str, dict[str, float | int]]:
    """Per depth (``"d1"``, ``"d2"``...): the eval file's tasks, how many have a program that occurs
    in training (``pool``, sorted keys), and the share; information, not a violation."""
    shared = member(ev.program, pool)
    out: dict[str, dict[str, float | int]] = {}
    for d in sorted(set(ev.program_depth.tolist())):
        at = ev.program_depth == d
        n, k = int(at.sum()), int(shared[at].sum())
        out[f"d{d}"] = {"tasks": n, "in_training": k, "share": round(k / n, 4) if n else 0.0}
    return out


def rows_library(train_paths, eval_paths, chosen: OperatorLibrary | None = None) -> OperatorLibrary:
    """The operator library the rows of these build folders and files name (one for all of them;
    opgen.library.library_of_rows: ``chosen``, the study's or the user's store's): what
    ``--heldout-ops heldout`` means and the report's order."""
    return library_of_rows([*parquet_files(train_paths, "train"), *parquet_files(eval_paths, "eval")], chosen)


def check_files(train_paths, eval_paths, heldout_ops: tuple[str, ...] | None = None,
                progress=None, library: OperatorLibrary | None = None) -> dict:
    """The study's rule over files of separate builds: a report per (train file, eval file) pair.

    ``heldout_ops``: the operators training may not compose (None: the held-out operators of the
    library the rows name, :func:`rows_library`; ``library``: the one the user gave).
    ``progress(done, total, path, rows)`` is called
    after each file is read (the slow part)."""
    if heldout_ops is None:
        heldout_ops = rows_library(train_paths, eval_paths, library).heldout_ids
    train_files, eval_files = parquet_files(train_paths, "train"), parquet_files(eval_paths, "eval")
    total = len(train_files) + len(eval_files)
    read: list[FileKeys] = []
    for p in (*train_files, *eval_files):
        read.append(file_keys(p, heldout_ops))
        if progress is not None:
            progress(len(read), total, str(p), read[-1].rows)
    train, evals = read[:len(train_files)], read[len(train_files):]
    pairs, violations = [], []
    all_programs = []
    for tr in train:
        pools = {"prompt": np.sort(tr.prompt), "task": np.sort(tr.task), "program": np.sort(tr.program)}
        all_programs.append(pools["program"])
        for ev in evals:
            comps = ev.program_depth >= 2
            found = {"prompt": _hits(ev.prompt, None, pools["prompt"]),
                     "task": _hits(ev.task, ev.task_rows, pools["task"]),
                     "heldout_program": _hits(ev.program[comps & ev.program_heldout],
                                              ev.program_rows[comps & ev.program_heldout], pools["program"])}
            shared_comps = _hits(ev.program[comps], ev.program_rows[comps], pools["program"])
            pair = {"train": tr.path, "eval": ev.path, "train_rows": tr.rows, "eval_rows": ev.rows,
                    "checked": {"prompts": int(ev.prompt.size), "tasks": int(ev.task.size),
                                "compositions": int(comps.sum()),
                                "heldout_compositions": int((comps & ev.program_heldout).sum())},
                    **{k: n for k, (n, _) in found.items()},
                    # information: rows whose composition's program (train operators) also occurs here
                    "shared_composition_rows": shared_comps[0]}
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
    union = np.sort(np.concatenate(all_programs)) if all_programs else np.empty(0, dtype=np.uint64)
    shares = {ev.path: program_share(ev, union) for ev in evals}
    return {"ok": not violations, "heldout_ops": list(heldout_ops), "pairs": pairs, "train_files": trains,
            "violations": violations, "program_share": shares,
            "nothing_to_check": not pairs and not any(t["rows"] for t in trains)}


def describe_files(report: dict) -> list[str]:
    lines = []
    for v in report["violations"]:
        if v["kind"] == "heldout_composed":
            lines.append(f"{v['train']}: {v['rows']} training rows compose a held-out operator (rows {v['examples']})")
        else:
            what = {"prompt": "prompt", "task": "task (program and input)",
                    "heldout_program": "held-out composition's program"}[v["kind"]]
            lines.append(f"{v['eval']}: {v['rows']} rows share their {what} with {v['train']} (rows {v['examples']})")
    return lines


# ---------------------------------------------------------------- leakage.avoid_programs (opt-in)
#
# Eval tasks never equal training tasks by construction (opgen.rng.input_side), so no recipe needs
# another to build. A recipe that also wants its eval programs off the training cells' programs
# names those cells under leakage.avoid_programs: only then are they replayed (and its eval rows
# depend on them, and its ID programs are no longer the study's distribution: docs/recipes.md).


_TRAINING_PROGRAMS: dict[tuple, frozenset] = {}


def training_programs(specs, seed: int | None = None, library: OperatorLibrary = STUDY) -> frozenset:
    """Keys (``rows.h64`` of the canonical program) of every composition (depth 2 or more, a
    single call on a composed argument such as ``func_9((x + x))`` included) in the train splits
    of the recipes ``specs``, replayed as the builder draws them (a row that repeats an earlier
    row's unique key takes its next candidate), so the keys are those of their files. They are
    replayed over ``library``, the building recipe's: a recipe named here (perhaps by a manifest
    being verified) never loads a library of its own."""
    from opgen import recipe as R
    from opgen.expr import recursion_headroom
    from opgen.formats import scan
    from opgen.rows import h64

    loaded = [R.load(s, seed, library) for s in specs]
    key = tuple((r.path, r.sha256, r.seed, library.digest) for r in loaded)
    if key in _TRAINING_PROGRAMS:
        return _TRAINING_PROGRAMS[key]
    programs: set[int] = set()
    for recipe in loaded:
        seen: set[int] = set()
        for cfg in recipe.splits:
            gen = R.build_generator(cfg, recipe)
            with recursion_headroom():
                for i in range(gen.count()):
                    j, item = gen.first_valid(i)
                    while True:
                        scanned = [scan(t.program, {}) for t in item.tasks]
                        exprs = [e for e, _ in scanned]
                        if cfg.unique == "task":
                            ids = [e + "\x00" + t.input for e, t in zip(exprs, item.tasks)]
                            ukey = h64(ids[0]) if len(ids) == 1 else h64("\x01".join(ids))
                        else:
                            ukey = h64(exprs[0]) if len(exprs) == 1 else h64("\x01".join(exprs))
                        if cfg.unique == "none" or ukey not in seen or not gen.REDRAWABLE:
                            break
                        j, item = gen.first_valid(i, j + 1)
                    if cfg.unique != "none":
                        seen.add(ukey)
                    if cfg.role == "train":
                        programs.update(h64(e) for e, depth in scanned if depth >= 2)
    _TRAINING_PROGRAMS[key] = frozenset(programs)
    return _TRAINING_PROGRAMS[key]
