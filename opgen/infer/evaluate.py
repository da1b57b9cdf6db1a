"""One model over several data files: generate (plain and, optionally, decomposed), score, report.

Layout, per model::

    DIR/<model>/<data>_generations.jsonl             one line per row (index, prompt_sha256, response, ...)
    DIR/<model>/<data>/                              opgen score's artifacts for those generations
    DIR/<model>/<data>_decomposed_generations.jsonl  with --decomposed: assembled answers + their recalls
    DIR/<model>/<data>_decomposed/                   their score artifacts
    DIR/<model>/metrics.json                         written last: its presence means the model is done
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opgen import __version__
from opgen.infer import decomposed as decomp
from opgen.infer.base import Backend, EngineOptions, Sampling, make_backend
from opgen.infer.run import SUMMARY_FIELDS, Plan, copy_rows, plain_plan, read_log, read_rows, run, summarize_log


class ConfigMismatch(ValueError):
    """--resume with settings that differ from the ones the existing generations were made with."""


@dataclass(frozen=True)
class EvalConfig:
    backend: str
    sampling: Sampling
    engine: EngineOptions = EngineOptions()
    limit: int | None = None
    resume: bool = False
    decomposed: bool = False
    score: bool = True
    batch_size: int = 256
    workers: int = 2
    progress: bool = True
    static: bool = True  # grade programs of library code only without running them (docs/scoring.md)


def data_name(path: Path) -> str:
    return Path(path).name.removesuffix(".parquet")


def write_json_atomic(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _generation_settings(cfg: EvalConfig, model: Path) -> dict:
    """What must not change between an interrupted run and its resumption."""
    return {"backend": cfg.backend, "model": str(model), "sampling": cfg.sampling.to_dict()}


def _check_settings(path: Path, settings: dict, resume: bool) -> None:
    if resume and path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old != settings:
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise ConfigMismatch(f"{path}: the existing generations were made with other settings "
                                 f"({', '.join(diff)} differ); rerun with the same options or without --resume")
    write_json_atomic(path, settings)


def score(data: Path, responses: Path, out: Path, workers: int, static: bool = True) -> dict:
    from opgen.score import score_files

    return score_files(data, responses, out, workers=workers, static=static)


def _one_pass(backend: Backend, model_dir: Path, model: Path, data: Path, rows, plan: Plan, suffix: str,
              cfg: EvalConfig, label: str) -> dict:
    name = data_name(data) + suffix
    gen_path = model_dir / f"{name}_generations.jsonl"
    _check_settings(model_dir / f"{name}_generations.settings.json", _generation_settings(cfg, model), cfg.resume)
    # transformers works through its sub-batches one by one anyway: flushing after each costs
    # nothing and keeps resume and progress fine-grained
    batch = min(cfg.batch_size, cfg.engine.batch_size) if cfg.backend == "hf" else cfg.batch_size
    stats = run(backend, rows, gen_path, plan, resume=cfg.resume, batch_size=batch,
                progress=f"{label} {name}" if cfg.progress else None)
    wanted = {r.index for r in rows}
    log = read_log(gen_path, keep=SUMMARY_FIELDS)
    records = [rec for i, rec in sorted(log.items()) if i in wanted]
    result = {"generations": gen_path.name, "run": stats.to_dict(), "generation": summarize_log(records)}
    if cfg.score:
        result["scores"] = name
        extra = len(log) > len(records)
        result["summary"] = _score_rows(data, gen_path, model_dir / name, cfg.workers, wanted if extra else None,
                                        cfg.static)
    return result


def _score_rows(data: Path, gen_path: Path, out: Path, workers: int, only: set[int] | None,
                static: bool = True) -> dict:
    """Score the generations, or only rows ``only``: a file resumed under a smaller --limit holds
    more rows than were asked for this time."""
    if only is None:
        return score(data, gen_path, out, workers, static)
    fd, tmp = tempfile.mkstemp(prefix=f".{gen_path.name}.", suffix=".jsonl", dir=gen_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            copy_rows(gen_path, fh, only)
        summary = score(data, Path(tmp), out, workers, static)
    finally:
        Path(tmp).unlink(missing_ok=True)
    summary["responses"] = str(gen_path)
    return summary


def evaluate_model(model: Path, name: str, data_files: Sequence[Path], out: Path, cfg: EvalConfig) -> dict:
    """Evaluate one model on every data file; returns (and writes) its metrics.json."""
    model_dir = out / name
    model_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = model_dir / "metrics.json"
    metrics_path.unlink(missing_ok=True)  # present only once this evaluation is complete
    loaded = [(d, read_rows(d, cfg.limit)) for d in data_files]
    skipped_decomposed = {data_name(d): why for d, rows in loaded
                          if cfg.decomposed and (why := decomp.applicable(rows)) is not None}
    metrics: dict = {
        "model": name, "model_path": str(model), "backend": cfg.backend,
        "sampling": cfg.sampling.to_dict(), "limit": cfg.limit, "opgen_version": __version__,
        "data": {},
    }
    with make_backend(cfg.backend, model, cfg.sampling, cfg.engine) as backend:
        for data, rows in loaded:
            dn = data_name(data)
            backend.begin_data(dn)
            entry = {"path": str(data), "rows": len(rows)}
            entry.update(_one_pass(backend, model_dir, model, data, rows, plain_plan(cfg.sampling), "", cfg, name))
            if cfg.decomposed:
                if dn in skipped_decomposed:
                    entry["decomposed"] = {"skipped": skipped_decomposed[dn]}
                else:
                    backend.begin_data(dn + "_decomposed")
                    entry["decomposed"] = _one_pass(backend, model_dir, model, data, rows,
                                                    decomp.decomposed_plan(cfg.sampling), "_decomposed", cfg, name)
            metrics["data"][dn] = entry
    write_json_atomic(metrics_path, metrics)
    return metrics
