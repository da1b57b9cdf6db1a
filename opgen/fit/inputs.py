"""Readers: what a fit is made of, from opgen sweep folders (+ a runs table), a tidy CSV, or the reference
analysis's own layout (a local folder, or a Hub repository through huggingface_hub).

Everything becomes one ``Observations``: per (split, run, seed, step or compute, cluster) a count of
correct answers and of answers (or, for the reference layout, which holds rates only, a rate), plus
per run its pretraining tokens, loss and the factors of RL compute, and the sha256 of every file read.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, overload

from opgen.fit import FitInputError
from opgen.write import sha256_of

RUN_FIELDS = ("tokens", "loss", "params", "prompts_per_step", "group", "prompt_tokens", "response_tokens")
CLUSTER_BY = ("ops", "family", "structure", "prompt")
# the reference analysis's constants (its argparse defaults and module constants)
REFERENCE_DEFAULTS = {"params": 20.5e6, "prompts_per_step": 256, "group": 8, "prompt_tokens": 300.0,
                      "response_tokens": 1400.0}


@dataclass
class Observations:
    source: str
    counts: bool  # False: ``cells`` hold rates (k = rate, n = None)
    cluster_by: str | None  # what a cluster is, None when a cell is not split into clusters
    runs: dict[str, dict] = field(default_factory=dict)
    # (split, run, seed, step, compute, cluster) -> [k, n]
    cells: dict[tuple, list] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256
    notes: list[str] = field(default_factory=list)  # what was left out while reading, by name (fit.json warnings)

    def add(self, key: tuple, k: float, n: int | None) -> None:
        cell = self.cells.setdefault(key, [0, 0])
        if n is None:
            cell[0], cell[1] = k, None
        else:
            cell[0] += k
            cell[1] += n


@overload
def _number(value: object, where: str, what: str, *, integer: Literal[True], positive: bool = ...,
            allow_none: Literal[False]) -> int: ...
@overload
def _number(value: object, where: str, what: str, *, integer: Literal[True], positive: bool = ...,
            allow_none: Literal[True] = ...) -> int | None: ...
@overload
def _number(value: object, where: str, what: str, *, integer: bool = ..., positive: bool = ...,
            allow_none: Literal[False]) -> float | int: ...
@overload
def _number(value: object, where: str, what: str, *, integer: bool = ..., positive: bool = ...,
            allow_none: bool = ...) -> float | int | None: ...
def _number(value, where: str, what: str, *, integer: bool = False, positive: bool = False,
            allow_none: bool = True) -> float | int | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if allow_none:
            return None
        raise FitInputError(f"{where}: {what} is missing")
    if isinstance(value, bool):
        raise FitInputError(f"{where}: {what} must be a number, not {value!r}")
    try:
        num = float(value)
    except (TypeError, ValueError):
        raise FitInputError(f"{where}: {what} must be a number, not {value!r}") from None
    if not math.isfinite(num):
        raise FitInputError(f"{where}: {what} must be finite, not {value!r}")
    if integer:
        if num != int(num):
            raise FitInputError(f"{where}: {what} must be a whole number, not {value!r}")
        num = int(num)
    if positive and num <= 0:
        raise FitInputError(f"{where}: {what} must be positive, not {value!r}")
    return num


def _run_info(row: Mapping, where: str) -> dict:
    info = {}
    for f in RUN_FIELDS:
        info[f] = _number(row.get(f), where, f, positive=f not in ("loss",))
    return info


def _merge_run(runs: dict, run: str, info: Mapping, where: str) -> None:
    """Per-run attributes may repeat on every row of a run; they must then agree."""
    have = runs.setdefault(run, {f: None for f in RUN_FIELDS})
    for f, v in info.items():
        if v is None:
            continue
        if have.get(f) is not None and have[f] != v:
            raise FitInputError(f"{where}: run {run!r} has {f} = {v!r} here but {have[f]!r} on an earlier row")
        have[f] = v


def _read_csv(path: Path) -> list[dict]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FitInputError(f"{path}: cannot read as CSV ({exc})") from None
    if not rows:
        raise FitInputError(f"{path}: no rows")
    return rows


# ---------------------------------------------------------------------------------------- runs table


def _yaml_runs_rows(path: Path) -> list[dict]:
    """The checkpoint rows of a YAML runs table, each with its run's fields and ``_where``."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise FitInputError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), dict) or not doc["runs"]:
        raise FitInputError(f"{path}: expected a mapping 'runs: {{RUN: {{..., checkpoints: [...]}}}}'")
    rows = []
    for run, body in doc["runs"].items():
        where = f"{path}: runs.{run}"
        if not isinstance(body, dict) or not isinstance(body.get("checkpoints"), list):
            raise FitInputError(f"{where}: needs a 'checkpoints' list")
        unknown = sorted(set(body) - set(RUN_FIELDS) - {"checkpoints"})
        if unknown:
            raise FitInputError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(RUN_FIELDS)})")
        for i, ck in enumerate(body["checkpoints"]):
            if not isinstance(ck, dict):
                raise FitInputError(f"{where}.checkpoints[{i}]: expected a mapping with 'model'")
            bad = sorted(set(ck) - {"model", "step", "seed"})
            if bad:
                raise FitInputError(f"{where}.checkpoints[{i}]: unknown field {bad[0]!r}")
            rows.append({**{k: v for k, v in body.items() if k != "checkpoints"}, **ck, "run": str(run),
                         "_where": f"{where}.checkpoints[{i}]"})
    return rows


def _csv_runs_rows(path: Path) -> list[dict]:
    """The rows of a CSV runs table, each with ``_where``; ``run`` and ``model`` columns required."""
    rows = [dict(r, _where=f"{path}: row {i}") for i, r in enumerate(_read_csv(path), 2)]
    for col in ("run", "model"):
        if col not in rows[0]:
            raise FitInputError(f"{path}: no {col!r} column")
    return rows


def _checkpoint_of(r: dict) -> dict:
    """One runs-table row as a checkpoint {run, model, seed, step, where}, its fields checked."""
    where = r["_where"]
    run = str(r.get("run") or "").strip()
    model = str(r.get("model") or "").strip()
    if not run or not model:
        raise FitInputError(f"{where}: 'run' and 'model' are required")
    seed = _number(r.get("seed"), where, "seed", integer=True)
    step = _number(r.get("step"), where, "step", integer=True)
    if step is not None and step < 0:
        raise FitInputError(f"{where}: step must be >= 0")
    return {"run": run, "model": model, "seed": 0 if seed is None else seed, "step": step, "where": where}


def read_runs_table(path: Path) -> tuple[list[dict], dict[str, dict]]:
    """Checkpoints [{run, seed, model, step}] and per-run attributes from a YAML or CSV runs table.

    CSV: one row per model folder — run, model, seed, step (optional: from the folder name) and the
    per-run columns tokens, loss, params, prompts_per_step, group, prompt_tokens, response_tokens.
    YAML: ``runs: {RUN: {tokens: ..., loss: ..., ..., checkpoints: [{model, step, seed}, ...]}}``.
    """
    path = Path(path)
    if not path.is_file():
        raise FitInputError(f"{path}: runs table not found")
    rows = _yaml_runs_rows(path) if path.suffix.lower() in (".yaml", ".yml") else _csv_runs_rows(path)
    checkpoints: list[dict] = []
    runs: dict[str, dict] = {}
    for r in rows:
        ck = _checkpoint_of(r)
        checkpoints.append(ck)
        _merge_run(runs, ck["run"], _run_info(r, ck["where"]), ck["where"])
    return checkpoints, runs


# ------------------------------------------------------------------------------------------- sweeps


def _ops_of(data_path: Path, cache: dict, obs: Observations) -> list[str]:
    """Each row's operator set (extra_info.ops of the data file the sweep was evaluated on)."""
    key = str(data_path)
    if key not in cache:
        if not data_path.is_file():
            raise FitInputError(f"{data_path}: the data file named in metrics.json is not there; "
                                f"--cluster-by ops reads each row's operator set from it "
                                f"(or use --cluster-by family/structure/prompt)")
        cache[key] = _op_sets(data_path)
        obs.files[key] = sha256_of(data_path)
    return cache[key]


def _op_sets(data_path: Path) -> list[str]:
    """Each row's operator set, ``+``-joined, read batch by batch (only ``extra_info.ops``); equal
    sets are one string, so a file of millions of rows costs a pointer per row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out: list[str] = []
    seen: dict[tuple, str] = {}
    try:
        pf = pq.ParquetFile(data_path, pre_buffer=False)  # (with it, memory grows with the file)
        for batch in pf.iter_batches(batch_size=8192, columns=["extra_info"]):
            extra = batch.column("extra_info")
            if not pa.types.is_struct(extra.type) or extra.type.get_field_index("ops") < 0:
                out.extend([""] * len(batch))
                continue
            for ops in pc.struct_field(extra, "ops").to_pylist():
                key = tuple(sorted(ops)) if isinstance(ops, list) else ()
                out.append(seen.setdefault(key, "+".join(key)))
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise FitInputError(f"{data_path}: cannot read extra_info.ops ({exc})") from None
    return out


def _read_metrics(model_dir: Path, obs: Observations) -> tuple[Path, dict, dict]:
    """(path, metrics, its ``data`` mapping) of a model's metrics.json, with every scores.jsonl it
    names present; each file's digest goes into ``obs.files``."""
    mpath = model_dir / "metrics.json"
    if not mpath.is_file():
        raise FitInputError(f"{mpath}: missing (the evaluation of this model is not complete)")
    try:
        metrics = json.loads(mpath.read_text(encoding="utf-8"))
        data = metrics["data"]
        if not isinstance(data, dict):
            raise TypeError("'data' is not a mapping")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise FitInputError(f"{mpath}: not an opgen eval metrics.json ({exc})") from None
    obs.files[str(mpath)] = sha256_of(mpath)
    for dn, entry in sorted(data.items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("scores"), str):
            raise FitInputError(f"{mpath}: data {dn!r} has no scores (evaluated with --no-score?)")
        spath = model_dir / entry["scores"] / "scores.jsonl"
        if not spath.is_file():
            raise FitInputError(f"{spath}: missing")
        obs.files[str(spath)] = sha256_of(spath)
    return mpath, metrics, data


def _cluster_of(rec: dict, cluster_by: str, mpath: Path, data: dict, where: Callable[[dict], str],
                obs: Observations, ops_cache: dict) -> str:
    """The cluster a scored record falls in under ``--cluster-by`` (``where(rec)`` names it in errors)."""
    if cluster_by == "ops":
        dpath = data[rec["data"]].get("path")
        if not isinstance(dpath, str):
            raise FitInputError(f"{mpath}: data {rec['data']!r} has no 'path' (needed by --cluster-by ops)")
        ops = _ops_of(Path(dpath), ops_cache, obs)
        if rec["index"] >= len(ops):
            raise FitInputError(f"{where(rec)}: the data file has only {len(ops)} rows")
        return ops[rec["index"]]
    if cluster_by == "prompt":
        return f"{rec['data']}#{rec['index']}"
    return str(rec.get(cluster_by, ""))


def _token_sums(data: dict) -> dict[str, list]:
    """``{"prompt": [sum, n], "response": [sum, n]}``: token counts over a model's data files."""
    tokens: dict[str, list] = {"prompt": [0.0, 0], "response": [0.0, 0]}
    for entry in data.values():
        gen = entry.get("generation") or {}
        for key, field_, count in (("prompt", "prompt_tokens_mean", "rows"), ("response", "completion_tokens_mean",
                                                                               "samples")):
            mean, n = gen.get(field_), gen.get(count)
            if isinstance(mean, (int, float)) and isinstance(n, int) and n > 0:
                tokens[key][0] += mean * n
                tokens[key][1] += n
    return tokens


def _read_checkpoint(model_dir: Path, run: str, seed: int, step: int, cluster_by: str, obs: Observations,
                     ops_cache: dict) -> dict:
    from opgen.sweep import correct, model_records

    mpath, metrics, data = _read_metrics(model_dir, obs)

    def where(rec: dict) -> str:
        return f"{model_dir / data[rec['data']]['scores'] / 'scores.jsonl'}: index {rec.get('index')!r}"

    try:  # one record at a time: a checkpoint's millions of responses are counted, never held
        for rec in model_records(model_dir, metrics):
            if not isinstance(rec.get("index"), int) or not isinstance(rec.get("acc"), (int, float)):
                raise FitInputError(f"{where(rec)}: a scores.jsonl line needs an integer 'index' and a numeric 'acc'")
            cluster = _cluster_of(rec, cluster_by, mpath, data, where, obs, ops_cache)
            obs.add((str(rec["split"]), run, seed, step, None, cluster), int(correct(rec)), 1)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise FitInputError(f"{model_dir}: unreadable scores.jsonl ({exc})") from None
    return _token_sums(data)


def _folder_checkpoints(sweeps: list[Path], obs: Observations) -> list[dict]:
    """Without a runs table: each sweep folder is one run (seed 0), each finished model in it a
    checkpoint whose step its name gives."""
    checkpoints = []
    for s in sweeps:
        for m in sorted(s.glob("*/metrics.json")):
            checkpoints.append({"run": s.name, "model": m.parent.name, "seed": 0, "step": None,
                                "where": str(m.parent)})
        unfinished = sorted(d.name for d in s.iterdir()
                            if d.is_dir() and not (d / "metrics.json").is_file() and _looks_like_model(d))
        if unfinished:
            obs.notes.append(f"{s}: {len(unfinished)} unfinished checkpoint(s) left out (no metrics.json): "
                             f"{', '.join(unfinished)}")
        obs.runs.setdefault(s.name, {f: None for f in RUN_FIELDS})
    if not checkpoints:
        raise FitInputError(f"no finished models (*/metrics.json) under {', '.join(map(str, sweeps))}")
    return checkpoints


def _looks_like_model(d: Path) -> bool:
    """A model folder of an eval in progress: it has generations or a step in its name."""
    from opgen.sweep import checkpoint_step

    return checkpoint_step(d.name) is not None or any(d.glob("*_generations.jsonl")) or any(d.glob("*/"))


def _model_dir(ck: dict, sweeps: list[Path]) -> Path:
    """The one sweep folder's model folder a checkpoint names."""
    found = [s / ck["model"] for s in sweeps if (s / ck["model"]).is_dir()]
    if not found:
        raise FitInputError(f"{ck['where']}: model folder {ck['model']!r} is in none of the sweep folders "
                            f"({', '.join(map(str, sweeps))})")
    if len(found) > 1:
        raise FitInputError(f"{ck['where']}: model folder {ck['model']!r} is in several sweep folders: "
                            f"{', '.join(map(str, found))}")
    return found[0]


def _checkpoint_step(ck: dict, seen: dict[tuple, str]) -> int:
    """A checkpoint's step (given, else from the model's name), once per (run, seed, step)."""
    from opgen.sweep import checkpoint_step

    step = ck["step"] if ck["step"] is not None else checkpoint_step(ck["model"])
    if step is None:
        raise FitInputError(f"{ck['where']}: no step for model {ck['model']!r} (give a 'step' column; its name "
                            f"carries none)")
    key = (ck["run"], ck["seed"], step)
    if key in seen:
        raise FitInputError(f"{ck['where']}: run {ck['run']!r} seed {ck['seed']} step {step} is given twice "
                            f"({seen[key]} and {ck['model']})")
    seen[key] = ck["model"]
    return step


def _fill_token_means(obs: Observations, token_sums: dict[str, dict]) -> None:
    """Token means over each run's checkpoints, where the runs table does not give them."""
    for run, acc in token_sums.items():
        info = obs.runs[run]
        for k, f in (("prompt", "prompt_tokens"), ("response", "response_tokens")):
            if info.get(f) is None and acc[k][1]:
                info[f] = acc[k][0] / acc[k][1]
                info.setdefault("token_means_from", []).append(f)


def read_sweeps(sweeps: Iterable[Path], runs_table: Path | None, cluster_by: str = "ops") -> Observations:
    """opgen eval output folders. With a runs table, its model names are looked up in the folders;
    without one, each folder is one run (named after it, seed 0) and every finished model in it a
    checkpoint whose step comes from its name."""
    if cluster_by not in CLUSTER_BY:
        raise FitInputError(f"unknown --cluster-by {cluster_by!r} (known: {', '.join(CLUSTER_BY)})")
    sweeps = [Path(s) for s in sweeps]
    for s in sweeps:
        if not s.is_dir():
            raise FitInputError(f"{s}: sweep folder not found")
    obs = Observations("sweep", counts=True, cluster_by=cluster_by)
    if runs_table is not None:
        checkpoints, obs.runs = read_runs_table(runs_table)
        obs.files[str(runs_table)] = sha256_of(Path(runs_table))
    else:
        checkpoints = _folder_checkpoints(sweeps, obs)
    seen: dict[tuple, str] = {}
    token_sums: dict[str, dict] = {}
    ops_cache: dict = {}
    for ck in checkpoints:
        model_dir = _model_dir(ck, sweeps)
        step = _checkpoint_step(ck, seen)
        tok = _read_checkpoint(model_dir, ck["run"], ck["seed"], step, cluster_by, obs, ops_cache)
        acc = token_sums.setdefault(ck["run"], {"prompt": [0.0, 0], "response": [0.0, 0]})
        for k in acc:
            acc[k][0] += tok[k][0]
            acc[k][1] += tok[k][1]
    _fill_token_means(obs, token_sums)
    return obs


# ----------------------------------------------------------------------------------------- tidy CSV


def read_tidy(path: Path) -> Observations:
    """A tidy CSV: one row per (run, seed, step or compute, split[, cluster]) with n_correct and
    n_total, plus optional per-run columns (tokens, loss, params, ...)."""
    path = Path(path)
    if not path.is_file():
        raise FitInputError(f"{path}: tidy table not found")
    rows = _read_csv(path)
    cols = set(rows[0])
    for col in ("run", "n_correct", "n_total"):
        if col not in cols:
            raise FitInputError(f"{path}: no {col!r} column (counts are needed, not only rates)")
    if "step" not in cols and "compute" not in cols:
        raise FitInputError(f"{path}: needs a 'step' or a 'compute' column")
    obs = Observations("tidy", counts=True, cluster_by="cluster" if "cluster" in cols else None)
    obs.files[str(path)] = sha256_of(path)
    empty: list[int] = []
    seen: dict[tuple, int] = {}  # a cell's key -> the row that gave it
    for i, r in enumerate(rows, 2):
        where = f"{path}: row {i}"
        run = (r.get("run") or "").strip()
        if not run:
            raise FitInputError(f"{where}: 'run' is empty")
        seed = _number(r.get("seed"), where, "seed", integer=True)
        step = _number(r.get("step"), where, "step", integer=True)
        compute = _number(r.get("compute"), where, "compute", positive=True)
        if step is None and compute is None:
            raise FitInputError(f"{where}: needs a step or a compute value")
        k = _number(r.get("n_correct"), where, "n_correct", integer=True, allow_none=False)
        n = _number(r.get("n_total"), where, "n_total", integer=True, allow_none=False)
        if not (0 <= k <= n):
            raise FitInputError(f"{where}: n_correct = {k} must lie in [0, n_total = {n}]")
        split = (r.get("split") or "").strip() or "all"
        cluster = (r.get("cluster") or "").strip() if obs.cluster_by else None
        key = (split, run, 0 if seed is None else seed, step, compute, cluster)
        if key in seen:  # pooling them would count the same answers twice, or hide a mislabelled row
            raise FitInputError(f"{where}: the same cell as row {seen[key]} ({_cell_name(key)}); a tidy table has "
                                f"one row per (run, seed, step or compute, split[, cluster]): add their counts into "
                                f"one row, or tell them apart (a cluster column, another seed)")
        seen[key] = i
        if n == 0:  # no answers: no rate at all (not 0%)
            empty.append(i)
            continue
        obs.add(key, k, n)
        _merge_run(obs.runs, run, _run_info(r, where), where)
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
        obs.notes.append(f"{path}: {len(empty)} row(s) with n_total = 0 (no answers) left out, not counted as 0%: "
                         f"row {shown}")
    return obs


def _cell_name(key: tuple) -> str:
    split, run, seed, step, compute, cluster = key
    parts = [f"run {run!r}", f"seed {seed}", f"split {split!r}"]
    parts += [f"step {step}"] if step is not None else []
    parts += [f"compute {compute:g}"] if compute is not None else []
    parts += [f"cluster {cluster!r}"] if cluster is not None else []
    return ", ".join(parts)


# ----------------------------------------------------------------------------- the reference layout


def read_reference(root: Path, family: str = "20m") -> Observations:
    """``results/t2/*.json`` and ``results/t2b/*.json`` (``summary.pass1_mean_overall`` per RL run and
    step; tags ``rl_<family>_<T>B_s<step>`` / ``t2b_<family>_<T>B_s<step>``) and
    ``results/loss/loss_model_<family>_*.json`` (``pretrain_tokens``, ``val_loss``), read as the
    reference script reads them: t2b_ tags form split ``b1b2``, the others ``b3b4``; a run is one
    pretraining token count; losses are matched on tokens rounded to 0.01 B."""
    root = Path(root)
    if not (root / "results").is_dir():
        raise FitInputError(f"{root}: no results/ folder (expected results/t2, results/t2b, results/loss)")
    tag_re = re.compile(rf"(?:t2b_|rl_){re.escape(family)}_([\dp]+)B_s(\d+)")
    obs = Observations("reference", counts=False, cluster_by=None)
    seen: dict[tuple, Path] = {}
    files = sorted(p for sub in ("t2", "t2b") for p in (root / "results" / sub).rglob("*.json"))
    if not files:
        raise FitInputError(f"{root}: no results/t2/*.json or results/t2b/*.json")
    for f in files:
        tag = f.name[:-5]
        m = tag_re.match(tag)
        if not m:
            continue
        d = _load_json(f)
        obs.files[str(f)] = sha256_of(f)
        try:
            value = d["summary"]["pass1_mean_overall"]
        except (KeyError, TypeError):
            raise FitInputError(f"{f}: no summary.pass1_mean_overall") from None
        value = _number(value, str(f), "summary.pass1_mean_overall", allow_none=False)
        subset = "b1b2" if tag.startswith("t2b_") else "b3b4"
        tok_b = float(m.group(1).replace("p", "."))
        step = int(m.group(2))
        key = (subset, tok_b, step)
        if key in seen:
            raise FitInputError(f"{f}: split {subset} run {tok_b:g}B step {step} is also given by {seen[key]}")
        seen[key] = f
        run = f"{tok_b:g}B"
        obs.add((subset, run, 0, step, None, None), value, None)
        info = obs.runs.setdefault(run, {f_: None for f_ in RUN_FIELDS})
        info["tokens"] = tok_b * 1e9
        info["tokens_b"] = tok_b
    if not obs.cells:
        raise FitInputError(f"{root}: no result file's name matches {tag_re.pattern}")
    losses: dict[float, float] = {}
    for f in sorted((root / "results" / "loss").glob(f"loss_model_{family}_*.json")):
        d = _load_json(f)
        obs.files[str(f)] = sha256_of(f)
        if not isinstance(d, dict) or "val_loss" not in d:
            raise FitInputError(f"{f}: no val_loss")
        tok = _number(d.get("pretrain_tokens", 0), str(f), "pretrain_tokens", allow_none=False) / 1e9
        losses[round(tok, 2)] = _number(d["val_loss"], str(f), "val_loss", allow_none=False)
    for info in obs.runs.values():
        info["loss"] = losses.get(round(info["tokens_b"], 2))
        for k, v in REFERENCE_DEFAULTS.items():
            info[k] = v
    return obs


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise FitInputError(f"{path}: not valid JSON ({exc})") from None


def read_hub(repo_id: str, family: str = "20m", revision: str | None = None) -> Observations:
    """The reference layout from a Hub dataset repository (needs network and huggingface_hub)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FitInputError("--hub-repo needs huggingface_hub (pip install 'opgen[hub]')") from None
    try:
        local = snapshot_download(repo_id, repo_type="dataset", revision=revision,
                                  allow_patterns=["results/t2/*", "results/t2b/*",
                                                  f"results/loss/loss_model_{family}_*"])
    except Exception as exc:  # network and auth errors come in many types
        raise FitInputError(f"hub repository {repo_id!r}: cannot download ({exc})") from None
    obs = read_reference(Path(local), family)
    obs.source = f"hub:{repo_id}"
    return obs
