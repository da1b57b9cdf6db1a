"""`opgen eval`: generate responses with a model (vLLM, transformers or a replayed file) and grade them."""

from __future__ import annotations

from pathlib import Path

import click

from opgen.infer.base import BACKENDS


def _model_names(models: tuple[Path, ...]) -> list[str]:
    """Folder names; where two checkpoints share one (run1/step100, run2/step100) the parent joins in."""
    names = [m.name.removesuffix(".jsonl") for m in models]
    if len(set(names)) < len(names):
        names = [f"{m.parent.name}_{n}" if names.count(n) > 1 else n for m, n in zip(models, names)]
    if len(set(names)) < len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise click.BadParameter(f"two models would both be written to {dup[0]!r}; give distinct paths",
                                 param_hint="--model")
    return names


@click.command("eval")
@click.option("--model", "models", multiple=True, required=True, type=click.Path(exists=True, path_type=Path),
              help="A model directory (HF format), or for --backend replay a responses JSONL file or a folder "
                   "of <data>_generations.jsonl. Repeat for a checkpoint sweep.")
@click.option("--data", "data_files", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A parquet data file (rows per docs/contracts.md). Repeatable.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: one subfolder per model, plus sweep.csv/json/png with several models.")
@click.option("--backend", type=click.Choice(BACKENDS), default="vllm", show_default=True)
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
@click.option("--hf-batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="transformers: prompts per generate() call.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--allow-weak-sandbox", is_flag=True,
              help="Grade even where the sandbox's isolation is below 'full' (it says what is then unprotected).")
def eval_(models, data_files, out_dir, backend, max_new_tokens, n, temperature, top_p, seed, max_model_len,
          limit, resume, decomposed, no_score, batch_size, workers, dtype, gpu_memory_utilization, enforce_eager,
          tensor_parallel_size, hf_batch_size, quiet, allow_weak_sandbox) -> None:
    """Generate with each --model on each --data file and grade the responses.

    Writes OUT/<model>/<data>_generations.jsonl (index, prompt_sha256, response, finish_reason,
    token counts), the scorer's artifacts in OUT/<model>/<data>/, and OUT/<model>/metrics.json
    (written last). With several models also OUT/sweep.csv, sweep.json and plots.
    Decoding is greedy with 3,072 new tokens unless told otherwise.
    """
    from opgen.infer import evaluate as ev
    from opgen.infer.base import BackendError, EngineOptions, Sampling
    from opgen.infer.run import DataError, LogError
    from opgen.score.report import ScoreInputError

    names = _model_names(models)
    data_names = [ev.data_name(d) for d in data_files]
    if len(set(data_names)) < len(data_names):
        raise click.BadParameter(f"two data files are both named {sorted(data_names)[0]!r}", param_hint="--data")
    if decomposed and n != 1:
        raise click.UsageError("--decomposed draws one sample per recall; use it with --n 1")
    if not no_score:
        # Before any generation: a sandbox refused after hours of generating would waste them.
        from opgen.score.sandbox import SandboxError, allow_weak_for_this_process, check_isolation

        if allow_weak_sandbox:
            allow_weak_for_this_process()
        try:
            check_isolation()
        except SandboxError as exc:
            raise click.ClickException(f"sandbox failure: {exc}") from None
    sampling = Sampling(max_new_tokens=max_new_tokens, n=n, temperature=temperature, top_p=top_p, seed=seed,
                        max_model_len=max_model_len)
    cfg = ev.EvalConfig(
        backend=backend, sampling=sampling, limit=limit, resume=resume, decomposed=decomposed, score=not no_score,
        batch_size=batch_size, workers=workers, progress=not quiet,
        engine=EngineOptions(dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                             enforce_eager=enforce_eager, tensor_parallel_size=tensor_parallel_size,
                             batch_size=hf_batch_size),
    )
    results = []
    for model, name in zip(models, names):
        try:
            metrics = ev.evaluate_model(model, name, data_files, out_dir, cfg)
        except DataError as exc:
            raise click.BadParameter(str(exc), param_hint="--data") from None
        except (BackendError, LogError, ev.ConfigMismatch) as exc:
            raise click.ClickException(f"{name}: {exc}") from None
        except ScoreInputError as exc:
            raise click.ClickException(f"{name}: scoring failed: {exc}") from None
        results.append(metrics)
        click.echo(_summary_line(metrics))
    if len(results) > 1 and not no_score:
        from opgen import sweep
        written = sweep.write_sweep(out_dir, results)
        click.echo(f"sweep: {', '.join(str(p) for p in written)}")


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
