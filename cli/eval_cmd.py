"""`opgen eval`: generate responses with a model (vLLM, transformers or a replayed file) and grade them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from opgen.infer import backends

from . import options

if TYPE_CHECKING:
    from opgen.distributed.ray_executor import RayOptions
    from opgen.infer.config import EvalRun
    from opgen.infer.openai_backend import OpenAIOptions


class BackendName(click.ParamType):
    """``--backend``: a name in the backends registry (opgen.infer.backends), read when the option
    is parsed, so a backend registered before the command runs is a choice too."""

    name = "backend"

    def get_metavar(self, param, ctx=None) -> str:  # click 8.1 and 8.2 signatures
        return "[" + "|".join(backends.BACKENDS) + "]"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(name) for name in backends.BACKENDS if name.startswith(incomplete)]

    def convert(self, value, param, ctx):
        if value in backends.SPECS:
            return value
        self.fail(f"{value!r} is not one of {', '.join(map(repr, backends.BACKENDS))}.", param, ctx)


@click.command("eval")
@click.option("--model", "models", multiple=True, required=True, type=click.Path(path_type=Path),
              help="A model directory (HF format); for --backend replay a responses JSONL file, verl's "
                   "generation parquet (a 'responses' column) or a folder of <data>_generations.jsonl/.parquet; "
                   "for --backend openai the served model's name. Repeat for a checkpoint sweep.")
@click.option("--data", "data_files", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A parquet data file (rows per docs/contracts.md). Repeatable.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: one subfolder per model, plus sweep.csv/json/png with several models.")
@click.option("--backend", type=BackendName(), default="vllm", show_default=True,
              help="An inference backend of the registry (opgen.infer.backends; docs/eval.md).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=3072, show_default=True)
@click.option("--n", "n", type=click.IntRange(min=1), default=1, show_default=True, help="Samples per row.")
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Sampling seed (vLLM: per request; transformers: per batch).")
@click.option("--max-model-len", type=click.IntRange(min=1), default=None,
              help="Context length (prompt + generation); default: the model's.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N rows of each data file.")
@click.option("--resume", is_flag=True, help="Keep rows already in the generations files; generate the rest.")
@click.option("--decomposed", is_flag=True,
              help="Also run decomposed inference: one 'Recall func_N' pass per operator, assembled mechanically.")
@click.option("--no-score", is_flag=True, help="Only generate (grade later with `opgen score`).")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Rows handed to the backend at once; the generations file is flushed after each batch "
                   "(with --backend hf: at most --hf-batch-size).")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Scorer sandbox workers.")
@click.option("--dtype", default="auto", show_default=True, help="Model dtype (auto, float32, bfloat16, ...).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=None,
              help="vLLM memory share (default 0.9 on a GPU, 0.1 of host RAM on CPU).")
@click.option("--enforce-eager", is_flag=True, help="vLLM: no CUDA graphs / compilation (faster start).")
@click.option("--tensor-parallel-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
              help="vLLM: one more keyword argument of vllm.LLM(...), e.g. max_num_seqs=64, revision=main, "
                   "enable_prefix_caching=true; VALUE is read as YAML (numbers, true/false, lists, {k: v}). "
                   "Repeatable.")
@click.option("--chat-template-kwarg", "template_kwargs", multiple=True, metavar="KEY=VALUE",
              help="vllm, hf, openai: one more variable of the chat template, e.g. enable_thinking=false (Qwen3); "
                   "VALUE is read as YAML, as --engine-arg's. vLLM: llm.chat(chat_template_kwargs=...); "
                   "transformers: apply_chat_template(**...); openai: the request's chat_template_kwargs. "
                   "Repeatable.")
@click.option("--hf-batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="transformers: prompts per generate() call.")
@click.option("--base-url", "base_urls", multiple=True,
              help="openai: the server's API root (http://HOST:PORT/v1). Repeat to load-balance several servers.")
@click.option("--api-key-env", default=None,
              help="openai: the environment variable holding the API key (default: OPENAI_API_KEY if set).")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="openai: requests in flight per --base-url.")
@click.option("--request-timeout", type=click.FloatRange(min=0.0, min_open=True), default=600.0, show_default=True,
              help="openai: seconds one request may take (the whole answer: no streaming).")
@click.option("--retries", type=click.IntRange(min=0), default=6, show_default=True,
              help="openai: retries of a request after 429/5xx/timeouts/connection errors, with exponential "
                   "backoff from 0.5 s (capped at 30 s; Retry-After honoured).")
@options.executor("local: one engine in this process, models one after another. ray: engine replicas as Ray "
                  "actors pulling chunks of every (model, data) from one queue (docs/eval.md, At scale).")
@options.ray_address()
@click.option("--replicas", type=click.IntRange(min=1), default=None,
              help="ray: engine replicas (default: one per GPU or tensor-parallel group; openai: one per "
                   "--base-url; without GPUs 1).")
@click.option("--replica-gpus", type=click.FloatRange(min=0.0), default=None,
              help="ray: GPUs per replica (default --tensor-parallel-size on a GPU cluster; 0.5 puts two on one GPU).")
@click.option("--replica-cpus", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True,
              help="ray: CPUs per replica.")
@options.ray_num_cpus()
@click.option("--chunk-rows", type=click.IntRange(min=1), default=1024, show_default=True,
              help="ray: rows per work unit (length-aware: a unit of long prompts holds fewer); whole "
                   "--batch-size batches, so each backend call sees the rows a local run would.")
@options.namespace(prefix="Scorer")
@options.progress()
@click.option("--quiet", is_flag=True, help="No progress bars (same as --no-progress).")
@options.no_static(prefix="Scorer")
@options.metric_defs()
@options.no_plots()
@options.allow_weak_sandbox()
@options.library(prefix="Scorer")
def eval_(**given: Any) -> None:
    """Generate with each --model on each --data file and grade the responses.

    Writes OUT/<model>/<data>_generations.jsonl (index, prompt_sha256, response, finish_reason,
    token counts), the scorer's artifacts in OUT/<model>/<data>/, and OUT/<model>/metrics.json
    (written last). With several models also OUT/sweep.csv, sweep.json and plots.
    Decoding is greedy with 3,072 new tokens unless told otherwise.
    """
    from opgen.infer import evaluate

    run = _run_of(given)
    if run.config.score:
        _check_sandbox(given["allow_weak_sandbox"])
    if backends.backend_spec(run.config.backend).model == "responses":
        _check_replay(run)
    from opgen import outdir

    outdir.install_sigterm()
    try:
        with outdir.claim(run.out, evaluate.out_entry(outdir.absolute(run.out)), "opgen eval"):
            _evaluate(run)
    except (KeyboardInterrupt, outdir.Terminated) as exc:
        term = isinstance(exc, outdir.Terminated)
        click.echo(f"{'terminated' if term else 'interrupted'}; the rows answered so far are in {run.out} "
                   f"(rerun with --resume to go on)", err=True)
        click.get_current_context().exit(outdir.exit_code(exc))


def _run_of(o: dict[str, Any]) -> EvalRun:
    """The options as the run's records (opgen.infer.config), validated before anything starts; a
    bad value: click's error naming the option."""
    from opgen.infer.base import EngineOptions, Sampling
    from opgen.infer.config import EvalConfig, EvalConfigError, EvalRun
    from opgen.score.metrics import MetricDefs
    from opgen.score.settings import GradeSettings

    ray = _ray_options(o)
    backend = o["backend"]
    try:
        sampling = Sampling(max_new_tokens=o["max_new_tokens"], n=o["n"], temperature=o["temperature"],
                            top_p=o["top_p"], seed=o["seed"], max_model_len=o["max_model_len"])
        engine = EngineOptions(dtype=o["dtype"], gpu_memory_utilization=o["gpu_memory_utilization"],
                               enforce_eager=o["enforce_eager"], tensor_parallel_size=o["tensor_parallel_size"],
                               batch_size=o["hf_batch_size"],
                               engine_args=_pairs(o["engine_args"], "--engine-arg", backend),
                               chat_template_kwargs=_pairs(o["template_kwargs"], "--chat-template-kwarg", backend))
        cfg = EvalConfig(
            backend=backend, sampling=sampling, engine=engine, limit=o["limit"], resume=o["resume"],
            decomposed=o["decomposed"], score=not o["no_score"], batch_size=o["batch_size"], workers=o["workers"],
            progress=not o["quiet"] and options.show_progress(o["progress"]),
            openai=_openai_options(o),
            grading=GradeSettings.resolve(namespace=o["namespace"], static=not o["no_static"],
                                          library=o["library_spec"]),
            metric_defs=MetricDefs(drift_call=o["drift_call"], pass_k=o["pass_k"], interval=o["interval"]),
            plots=not o["no_plots"],
        )
        return EvalRun(models=o["models"], data_files=o["data_files"], out=o["out_dir"], config=cfg,
                       executor=o["executor"], ray=ray)
    except EvalConfigError as exc:
        if exc.usage:
            raise click.UsageError(exc.reason) from None
        raise click.BadParameter(exc.reason, param_hint=exc.option) from None


def _ray_options(o: dict[str, Any]) -> RayOptions | None:
    """--executor ray: its options (None otherwise; a Ray option given without it: an error)."""
    if o["executor"] != "ray":
        given = [opt for opt, value in (("--ray-address", o["ray_address"]), ("--replicas", o["replicas"]),
                                        ("--replica-gpus", o["replica_gpus"]), ("--ray-num-cpus", o["ray_num_cpus"]))
                 if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only with --executor ray")
        return None
    from opgen.distributed.ray_executor import RayOptions

    return RayOptions(address=o["ray_address"], replicas=o["replicas"], replica_gpus=o["replica_gpus"],
                      replica_cpus=o["replica_cpus"], num_cpus=o["ray_num_cpus"], chunk_rows=o["chunk_rows"])


def _evaluate(run: EvalRun) -> None:
    """Under the lock on --out: every model, then the sweep."""
    cfg, out_dir = run.config, run.out
    if run.executor == "ray":
        results = _eval_ray(run)
    else:
        results = [_eval_local(model, name, run.data_files, out_dir, cfg) for model, name in zip(run.models, run.names)]
    skipped = _plots_skipped(results)
    if len(results) > 1 and cfg.score:
        from opgen import sweep
        try:
            notes: list[str] = []
            written = sweep.write_sweep(out_dir, results, notes, plots=cfg.plots)
            for note in notes:
                if note == sweep.PLOTS_MISSING:  # said once, below, for the models' plots too
                    skipped = True
                else:
                    click.echo(f"warning: {note}", err=True)
        except OSError as exc:
            from opgen.files import describe_os_error

            raise click.ClickException(f"sweep: {describe_os_error(exc, str(out_dir))}") from None
        click.echo(f"sweep: {', '.join(str(p) for p in written)}")
    if skipped:
        from opgen.score.report import plots_missing

        tables = "every model's scores and summaries" + (" and the sweep tables" if len(results) > 1 else "")
        click.echo(f"warning: {plots_missing(tables)}", err=True)


def _plots_skipped(results: list[dict]) -> bool:
    """Whether a model's score report skipped its plots for want of matplotlib."""
    return any((part.get("summary") or {}).get("plots_skipped")
               for metrics in results for entry in metrics.get("data", {}).values()
               for part in (entry, entry.get("decomposed") or {}))


def _check_sandbox(allow_weak_sandbox: bool) -> None:
    """Before any generation: a sandbox refused after hours of generating would waste them."""
    from opgen.score.sandbox import SandboxError, allow_weak_for_this_process, check_isolation

    if allow_weak_sandbox:
        allow_weak_for_this_process()
    try:
        check_isolation()
    except SandboxError as exc:
        raise click.ClickException(f"sandbox failure: {exc}") from None


def _eval_local(model, name, data_files, out_dir, cfg) -> dict:
    """One model's evaluation in this process; its metrics, reported."""
    from opgen.infer import evaluate
    from opgen.infer.base import BackendError
    from opgen.infer.run import DataError, LogError
    from opgen.score.inputs import ScoreInputError
    from opgen.score.report import ScoreOutputError

    try:
        metrics = evaluate.evaluate_model(model, name, data_files, out_dir, cfg)
    except DataError as exc:
        raise click.BadParameter(str(exc), param_hint="--data") from None
    except (BackendError, LogError, evaluate.ConfigMismatch) as exc:
        raise click.ClickException(f"{name}: {exc}") from None
    except (ScoreInputError, ScoreOutputError) as exc:
        raise click.ClickException(f"{name}: scoring failed: {exc}") from None
    except OSError as exc:  # a full disk or a read-only --out
        from opgen.files import describe_os_error

        raise click.ClickException(f"{name}: {describe_os_error(exc, str(out_dir / name))}; metrics.json was "
                                   f"not written (generations so far are kept for --resume)") from None
    _report(metrics)
    return metrics


def _eval_ray(run: EvalRun) -> list[dict]:
    from opgen import files
    from opgen.distributed import driver
    from opgen.distributed.ray_executor import RayPool
    from opgen.infer.run import DataError
    from opgen.score.inputs import ScoreInputError
    from opgen.score.report import ScoreOutputError

    cfg, opts, out_dir = run.config, run.ray, run.out
    assert opts is not None  # EvalRun: the defaults with --executor ray
    pool = None
    try:
        pool = RayPool(cfg.backend, cfg.engine, opts, openai=cfg.openai)
        results, report = driver.evaluate_sweep(run.models, run.names, run.data_files, out_dir, cfg, pool,
                                                chunk_rows=opts.chunk_rows, depth=opts.depth)
    except DataError as exc:
        raise click.BadParameter(str(exc), param_hint="--data") from None
    # BackendError, LogError, ConfigMismatch, RayError, AllReplicasLost, ChunkLost, InjectedFault: exit 1 with
    # their message (cli/__init__.py)
    except (ScoreInputError, ScoreOutputError) as exc:
        raise click.ClickException(f"scoring failed: {exc}") from None
    finally:
        if pool is not None:
            pool.close()
    info = report.to_dict()
    files.write_json_atomic(out_dir / "ray_report.json", info)
    for metrics in results:
        _report(metrics)
    click.echo(f"ray: {len(info['replicas'])} replicas, {info['rows_generated']} rows in {info['generation_s']:.1f} s "
               f"({info['chunks']} chunks, {info['chunks_redone']} redone); replicas waited on scoring "
               f"{info['replicas_waiting_on_scoring_share']:.1%} of {info['wall_s']:.1f} s; {out_dir}/ray_report.json")
    return results


def _openai_options(o: dict[str, Any]) -> OpenAIOptions | None:
    """--base-url and its companions (None without --base-url; EvalConfig checks the backend wants it)."""
    if not o["base_urls"]:
        return None
    from opgen.infer.openai_backend import OpenAIOptions

    try:
        return OpenAIOptions(base_urls=tuple(o["base_urls"]), api_key_env=o["api_key_env"],
                             concurrency=o["concurrency"], timeout_s=o["request_timeout"], retries=o["retries"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--base-url") from None


def _check_replay(run: EvalRun) -> None:
    """Replay: the responses must belong to these data files, checked before anything is written."""
    import pyarrow.parquet as pq

    from opgen.infer import decomposed, replay
    from opgen.infer.config import data_name
    from opgen.infer.run import DataError, read_rows

    cfg = run.config
    data = []
    for d in run.data_files:
        try:
            rows = read_rows(d, cfg.limit)
            data.append((data_name(d), rows, pq.ParquetFile(d).metadata.num_rows,
                         cfg.decomposed and decomposed.applicable(rows) is None))
        except DataError as exc:
            raise click.BadParameter(str(exc), param_hint="--data") from None
    for model in run.models:
        replay.check_source(model, data)  # a BackendError: exit 1, as when the same problem surfaces mid-run


def _pairs(pairs: tuple[str, ...], option: str, backend: str) -> tuple[tuple[str, object], ...]:
    """``KEY=VALUE`` options (--engine-arg, --chat-template-kwarg) -> ((key, value), ...) sorted by
    key; VALUE parsed as YAML (``8`` -> 8, ``false`` -> False), once ``backend`` is known to take
    them (EvalConfigError). Which keys are refused: EvalConfig."""
    import yaml

    from opgen.infer.config import check_backend_takes

    if pairs:
        check_backend_takes(backend, option)
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE with KEY a Python name", param_hint=option)
        if key in out:
            raise click.BadParameter(f"{key!r} given twice", param_hint=option)
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise click.BadParameter(f"{pair!r}: VALUE is not YAML ({exc})", param_hint=option) from None
    return tuple(sorted(out.items()))


def _report(metrics: dict) -> None:
    """One model's summary line, and the scorer's missing-import warning per data file (both executors)."""
    from opgen.score.report import missing_import_warning

    click.echo(_summary_line(metrics))
    for dn, entry in metrics["data"].items():
        warning = missing_import_warning(entry.get("summary") or {})
        if warning:
            click.echo(f"{metrics['model']}: {dn}: {warning}", err=True)


def _summary_line(metrics: dict) -> str:
    parts = []
    for dn, entry in metrics["data"].items():
        gen = entry["generation"]
        text = f"{dn}: {gen['rows']} rows, {gen['truncated_rows']} truncated"
        acc = ((entry.get("summary") or {}).get("overall") or {}).get("acc")
        if isinstance(acc, (int, float)):
            text += f", accuracy {acc:.3f}"
        dec = entry.get("decomposed") or {}
        dacc = ((dec.get("summary") or {}).get("overall") or {}).get("acc")
        if isinstance(dacc, (int, float)):
            text += f", decomposed {dacc:.3f}"
        parts.append(text)
    return f"{metrics['model']}: " + "; ".join(parts)
