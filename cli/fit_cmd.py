"""`opgen fit`: scaling laws over checkpoint sweeps (accuracy against RL compute, per run and across runs)."""

from __future__ import annotations

from pathlib import Path

import click

from . import options


class BadInput(click.ClickException):
    """Input the fit cannot use (a file, field or row is named): exit 2, like a usage error."""

    exit_code = 2


def _forms(value: str) -> tuple[str, ...]:
    from opgen.fit.models import CURVE_FORMS

    forms = tuple(f.strip() for f in value.split(",") if f.strip())
    bad = [f for f in forms if f not in CURVE_FORMS]
    if bad or not forms:
        raise click.BadParameter(f"unknown form {bad[0] if bad else value!r} (known: {', '.join(CURVE_FORMS)})",
                                 param_hint="--forms")
    return tuple(dict.fromkeys(forms))


def _observations(sweeps, runs_table, tidy, reference_dir, hub_repo, family, cluster_by, overrides):
    from opgen.fit import inputs

    if sweeps:
        obs = inputs.read_sweeps(sweeps, runs_table, cluster_by)
    elif tidy:
        obs = inputs.read_tidy(tidy)
    elif reference_dir:
        obs = inputs.read_reference(reference_dir, family)
    else:
        obs = inputs.read_hub(hub_repo, family)
    if obs.source.startswith(("reference", "hub:")):
        # the command line overrides the reference's constants
        for info in obs.runs.values():
            info.update({k: v for k, v in overrides.items() if v is not None})
    return obs


@click.command("fit")
@click.option("--sweep", "sweeps", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="An `opgen eval` output folder (per model metrics.json + scores.jsonl). Repeatable.")
@click.option("--runs", "runs_table", type=click.Path(dir_okay=False, path_type=Path),
              help="Runs table (YAML or CSV): run, seed, model folder, step, and per run tokens, loss, params, "
                   "prompts_per_step, group[, prompt_tokens, response_tokens]. Without it each --sweep is one run.")
@click.option("--tidy", type=click.Path(dir_okay=False, path_type=Path),
              help="A tidy CSV instead: run, seed, step or compute, split, n_correct, n_total[, cluster, tokens, "
                   "loss, params, ...].")
@click.option("--reference", "reference_dir", type=click.Path(file_okay=False, path_type=Path),
              help="A folder in the reference script's layout: results/t2/*.json, results/t2b/*.json, "
                   "results/loss/loss_model_*.json.")
@click.option("--hub-repo", help="The reference layout from a Hub dataset repository (network; huggingface_hub).")
@click.option("--family", default="20m", show_default=True, help="Model family in reference-layout file names.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: fit.json (written last), fit_runs.csv, fit_windows.csv, plots.")
@click.option("--compute", "compute_def", type=click.Choice(["rollout", "step", "given"]), default=None,
              help="C_RL: rollout = step x 10 N x prompts x group x (prompt + response tokens); step = the "
                   "step-only variant; given = a tidy table's compute column. [default: rollout, or given for a "
                   "tidy table with a compute column]")
@click.option("--c-ref", type=click.FloatRange(min=0, min_open=True), default=None,
              help="C_ref of the linear-in-log form. [default: 1e20; 1 with --compute step]")
@click.option("--forms", default="linear_log,sigmoid,power", show_default=True,
              help="Comma-separated curve forms: linear_log, sigmoid, power.")
@click.option("--weights", type=click.Choice(["binomial", "ols"]), default=None,
              help="binomial: weighted by 1/variance of each point's rate; ols: unweighted (the reference). "
                   "Inputs without counts are always ols. [default: binomial; ols with --like-reference]")
@click.option("--like-reference/--no-like-reference", "like_reference", default=None,
              help="Every default as the reference script has it: OLS on rates, across-run claims only over "
                   "runs with a loss and only from 4 of them, p-values beside n at any n, the exponential from "
                   "curve_fit's start point (the global optimum beside it as an alternative). [default: on for "
                   "--reference and --hub-repo, off otherwise]")
@click.option("--cluster-by", type=click.Choice(["ops", "family", "structure", "prompt"]), default="ops",
              show_default=True, help="Sweeps: prompts are resampled in clusters sharing this.")
@click.option("--resamples", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples (0: none).")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--level", type=click.FloatRange(min=0.5, max=0.999), default=0.95, show_default=True)
@click.option("--holdout-frac", type=click.FloatRange(min=0.0, max=0.75), default=0.25, show_default=True,
              help="Backtest: the latest fraction of each run's checkpoints is held out.")
@click.option("--min-step", type=click.IntRange(min=0), default=None, help="Fit window: first step used.")
@click.option("--max-step", type=click.IntRange(min=0), default=None, help="Fit window: last step used.")
@click.option("--min-n", type=click.IntRange(min=3), default=6, show_default=True,
              help="Runs below which across-run statistics carry a warning and no p-value (with --like-reference: "
                   "a warning, and the p-value beside n).")
@click.option("--assume-n", type=click.IntRange(min=1), default=None,
              help="Rates without counts (reference layout): treat each as this many answers.")
@click.option("--params", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Model parameters N, for runs the table does not give it.")
@click.option("--prompts-per-step", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option("--group", "group_size", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Rollouts per prompt.")
@click.option("--prompt-tokens", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Mean prompt tokens (default: from metrics.json).")
@click.option("--response-tokens", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Mean response tokens (default: from metrics.json).")
@options.no_plots()
@options.progress()
def fit(sweeps, runs_table, tidy, reference_dir, hub_repo, family, out_dir, compute_def, c_ref, forms, weights,
        like_reference, cluster_by, resamples, seed, level, holdout_frac, min_step, max_step, min_n, assume_n, params,
        prompts_per_step, group_size, prompt_tokens, response_tokens, no_plots, progress) -> None:
    """Fit accuracy against RL compute per run (linear-in-log, sigmoid, power law), then the per-run levels
    against pretraining loss and slopes against log tokens, with bootstrap intervals (prompts resampled in
    clusters, seeds when there are several) and profile intervals that flag what the data do not bound.

    Writes OUT/fit.json (schema schemas/fit.schema.json; written last), OUT/fit_runs.csv, OUT/fit_windows.csv
    and plots. Give exactly one input: --sweep [--runs], --tidy, --reference or --hub-repo.
    """
    try:
        from opgen.fit import (
            FitInputError,
            inputs,  # noqa: F401 - a missing scipy fails here, as one line
            pipeline,
            report,
        )
    except ImportError as exc:  # scipy lives in the 'fit' extra
        raise click.ClickException(f"opgen fit needs scipy: pip install 'opgen[fit]' ({exc})") from None

    given = [name for name, v in (("--sweep", sweeps), ("--tidy", tidy), ("--reference", reference_dir),
                                  ("--hub-repo", hub_repo)) if v]
    if len(given) != 1:
        raise click.UsageError("give exactly one input: --sweep DIR [--runs TABLE], --tidy CSV, --reference DIR "
                               "or --hub-repo REPO" + (f" (got {', '.join(given)})" if given else ""))
    if runs_table and not sweeps:
        raise click.UsageError("--runs goes with --sweep")
    if min_step is not None and max_step is not None and min_step > max_step:
        raise click.BadParameter(f"{min_step} > --max-step {max_step}", param_hint="--min-step")
    chosen_forms = _forms(forms)
    overrides = {"params": params, "prompts_per_step": prompts_per_step, "group": group_size,
                 "prompt_tokens": prompt_tokens, "response_tokens": response_tokens}
    import time

    show = options.show_progress(progress)
    t0 = time.perf_counter()

    def say(message: str) -> None:
        if show:
            click.echo(f"fit [{time.perf_counter() - t0:6.1f} s] {message}", err=True)

    from opgen import outdir

    # --out is locked and checked (writable, a folder opgen fit wrote or a new one) before any input
    # is read; the report is staged and swapped in whole when the fit is done
    with outdir.committed(out_dir, _own, "opgen fit", "fit.json") as stage:  # OutputError: exit 1 (cli/__init__.py)
        try:
            say("reading the input")
            obs = _observations(sweeps, runs_table, tidy, reference_dir, hub_repo, family, cluster_by, overrides)
            if compute_def is None:
                compute_def = "given" if all(k[4] is not None for k in obs.cells) else "rollout"
            if like_reference is None:
                like_reference = bool(reference_dir or hub_repo)
            if weights is None:
                weights = "ols" if like_reference else "binomial"
            cfg = pipeline.FitConfig(compute=compute_def, c_ref=c_ref, forms=chosen_forms, weights=weights,
                                     like_reference=like_reference,
                                     resamples=resamples, seed=seed, level=level, holdout_frac=holdout_frac,
                                     min_step=min_step, max_step=max_step, min_n=min_n, assume_n=assume_n,
                                     overrides=overrides)
            result, _curves = pipeline.run_fit(obs, cfg, progress=say)
        except FitInputError as exc:
            raise BadInput(str(exc)) from None
        say("writing fit.json, the CSVs" + ("" if no_plots else " and the plots"))
        staged = report.write(stage, result, plots=not no_plots)
    written = [outdir.absolute(out_dir) / p.relative_to(stage) for p in staged]
    for line in report.summary_lines(result):
        click.echo(line)
    for w in result["warnings"]:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"wrote {', '.join(str(p) for p in written)}")


def _own(name: str) -> bool:
    """What opgen fit writes into --out (a folder holding anything else is refused)."""
    return name.startswith("fit") and name.endswith((".json", ".csv", ".png"))
