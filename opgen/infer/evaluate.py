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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from opgen._version import __version__
from opgen.errors import OpgenError
from opgen.files import write_json_atomic
from opgen.infer import decomposed
from opgen.infer.backends import backend_spec, make_backend
from opgen.infer.base import Backend
from opgen.infer.config import EvalConfig, data_name  # EvalConfig: its home is opgen.infer.config
from opgen.infer.run import SUMMARY_FIELDS, Plan, plain_plan, read_log, read_rows, run, summarize_log
from opgen.score import score_files
from opgen.score.metrics import DEFAULT_DEFS, rollup_by_role
from opgen.score.settings import DEFAULT as DEFAULT_GRADING
from opgen.score.settings import GradeSettings

if TYPE_CHECKING:
    from opgen.score.metrics import MetricDefs


class ConfigMismatch(ValueError, OpgenError):
    """--resume with settings that differ from the ones the existing generations were made with."""

    exit_code = 1


def out_entry(out: Path):
    """``name -> bool``: whether an entry of an eval's --out is one `opgen eval` writes (a model's
    folder, the sweep's files, the Ray report and chunk store); anything else makes eval refuse
    the folder (opgen.outdir.claim)."""
    from opgen import sweep
    from opgen.infer.chunks import CHUNKS_DIR

    top = {"sweep.csv", "sweep.json", "ray_report.json", CHUNKS_DIR, *sweep.PLOTS}

    def own(name: str) -> bool:
        if name in top:
            return True
        path = out / name
        if not path.is_dir() or path.is_symlink():
            return False
        inner = [p.name for p in path.iterdir()]
        return not inner or any(n == "metrics.json" or n.endswith(("_generations.jsonl", "_generations.settings.json"))
                                for n in inner)

    return own


def _generation_settings(cfg: EvalConfig, model: Path) -> dict:
    """What must not change between an interrupted run and its resumption."""
    settings = {"backend": cfg.backend, "model": str(model), "sampling": cfg.sampling.to_dict()}
    if cfg.engine.engine_args:  # e.g. a revision or a quantization changes what the model answers
        settings["engine_args"] = dict(cfg.engine.engine_args)
    if cfg.engine.chat_template_kwargs:  # e.g. enable_thinking changes the prompt the model is shown
        settings["chat_template_kwargs"] = dict(cfg.engine.chat_template_kwargs)
    return settings


def _check_settings(path: Path, settings: dict, resume: bool) -> None:
    if resume and path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old != settings:
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise ConfigMismatch(f"{path}: the existing generations were made with other settings "
                                 f"({', '.join(diff)} differ); rerun with the same options or without --resume")
    write_json_atomic(path, settings)


def score(data: Path, responses: Path, out: Path, workers: int, settings: GradeSettings = DEFAULT_GRADING,
          only: set[int] | None = None, metric_defs: MetricDefs | None = None, plots: bool = True) -> dict:
    # the generations were made from these rows (and checked against them on --resume): their
    # prompts' digests need no second look
    return score_files(data, responses, out, workers=workers, settings=settings, only=only,
                       metric_defs=metric_defs or DEFAULT_DEFS, plots=plots, check_prompts=False)


def pass_paths(model_dir: Path, data: Path, suffix: str) -> tuple[str, Path]:
    name = data_name(data) + suffix
    return name, model_dir / f"{name}_generations.jsonl"


def begin_pass(model_dir: Path, model: Path, data: Path, suffix: str, cfg: EvalConfig) -> Path:
    """Check (with --resume) and record the generation settings; the path of the pass's generations."""
    name, gen_path = pass_paths(model_dir, data, suffix)
    _check_settings(model_dir / f"{name}_generations.settings.json", _generation_settings(cfg, model), cfg.resume)
    return gen_path


def loop_batch_size(cfg: EvalConfig) -> int:
    """Rows per backend call. A backend with an engine batch (transformers) works through its
    sub-batches one by one anyway: flushing after each costs nothing and keeps resume and progress
    fine-grained."""
    return min(cfg.batch_size, cfg.engine.batch_size) if backend_spec(cfg.backend).engine_batch else cfg.batch_size


def pass_result(gen_path: Path, rows, stats) -> tuple[dict, set[int] | None]:
    """A pass's metrics entry before scoring, and the rows to score (None: the whole file)."""
    wanted = {r.index for r in rows}
    log = read_log(gen_path, keep=SUMMARY_FIELDS)
    records = [rec for i, rec in sorted(log.items()) if i in wanted]
    result = {"generations": gen_path.name, "run": stats.to_dict(), "generation": summarize_log(records)}
    return result, (wanted if len(log) > len(records) else None)


def _one_pass(backend: Backend, model_dir: Path, model: Path, data: Path, rows, plan: Plan, suffix: str,
              cfg: EvalConfig, label: str) -> dict:
    gen_path = begin_pass(model_dir, model, data, suffix, cfg)
    name = data_name(data) + suffix
    stats = run(backend, rows, gen_path, plan, resume=cfg.resume, batch_size=loop_batch_size(cfg),
                progress=f"{label} {name}" if cfg.progress else None)
    result, only = pass_result(gen_path, rows, stats)
    if cfg.score:
        result["scores"] = name
        result["summary"] = _score_rows(data, gen_path, model_dir / name, cfg.workers, only, cfg.grading,
                                        cfg.metric_defs, cfg.plots)
    return result


def _score_rows(data: Path, gen_path: Path, out: Path, workers: int, only: set[int] | None,
                settings: GradeSettings = DEFAULT_GRADING, metric_defs: MetricDefs | None = None,
                plots: bool = True) -> dict:
    """Score the generations, or only rows ``only``: a file resumed under a smaller --limit holds
    more rows than were asked for this time."""
    summary = score(data, gen_path, out, workers, settings, only, metric_defs, plots)
    return note_subset(summary, gen_path, only)


def note_subset(summary: dict, gen_path: Path, only: set[int] | None) -> dict:
    if only is not None:
        summary["responses"] = str(gen_path)
    return summary


def rollup(metrics: dict) -> dict:
    """ID (train operators) / OOD (held-out) / total accuracy over the scored eval files of a model
    (probes left out: opgen.score.metrics.rollup_by_role), as the Interplay release publishes it."""
    return rollup_by_role(metrics["data"])


def load_data(data_files: Sequence[Path], cfg: EvalConfig) -> list[tuple[Path, list]]:
    return [(d, read_rows(d, cfg.limit)) for d in data_files]


def metrics_header(model: Path, name: str, cfg: EvalConfig) -> dict:
    return {
        "model": name, "model_path": str(model), "backend": cfg.backend,
        "sampling": cfg.sampling.to_dict(), "limit": cfg.limit, "opgen_version": __version__,
        "data": {},
    }


def passes(loaded, cfg: EvalConfig, metrics: dict):
    """(data, its data name, rows, suffix, plan) for each pass the config asks for, in order. Records
    each data file in ``metrics["data"]`` (its path and rows) as it comes, and a decomposed pass
    that does not apply there (its reason) instead of yielding it."""
    for data, rows in loaded:
        dn = data_name(data)
        metrics["data"][dn] = {"path": str(data), "rows": len(rows)}
        yield data, dn, rows, "", plain_plan(cfg.sampling)
        if cfg.decomposed:
            why = decomposed.applicable(rows)
            if why is not None:
                metrics["data"][dn]["decomposed"] = {"skipped": why}
            else:
                yield data, dn, rows, "_decomposed", decomposed.decomposed_plan(cfg.sampling)


def evaluate_model(model: Path, name: str, data_files: Sequence[Path], out: Path, cfg: EvalConfig) -> dict:
    """Evaluate one model on every data file; returns (and writes) its metrics.json."""
    model_dir = out / name
    metrics_path = model_dir / "metrics.json"
    metrics_path.unlink(missing_ok=True)  # present only once this evaluation is complete
    loaded = load_data(data_files, cfg)
    metrics = metrics_header(model, name, cfg)
    with make_backend(cfg.backend, model, cfg.sampling, cfg.engine, openai=cfg.openai) as backend:
        # made once the data and the model are there: an eval that fails up front leaves no empty folder
        model_dir.mkdir(parents=True, exist_ok=True)
        for data, dn, rows, suffix, plan in passes(loaded, cfg, metrics):
            backend.begin_data(dn + suffix)
            result = _one_pass(backend, model_dir, model, data, rows, plan, suffix, cfg, name)
            if suffix:
                metrics["data"][dn]["decomposed"] = result
            else:
                metrics["data"][dn].update(result)
    metrics["scope"] = rollup(metrics)
    write_json_atomic(metrics_path, metrics)
    return metrics
