"""`opgen score`: grade a file of model responses against a built parquet file."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.option("--data", "data", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A parquet file of rows (one split, one shard) as `opgen build` writes them.")
@click.option("--responses", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help='JSONL: {"index": i, "response": "..."} or {"index": i, "responses": [...]} per line.')
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for scores.jsonl, summary.json, summary.csv and the plots.")
@click.option("--mode", type=click.Choice(["auto", "forward", "program"]), default="auto", show_default=True,
              help="auto follows each row's ground truth.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Sandbox worker processes.")
@click.option("--policy", type=click.Choice(["output", "output_structure"]), default="output", show_default=True,
              help="What a score rewards: the output alone, or the output and the expression's structure.")
@click.option("--group", "group", type=click.Choice(["fraction", "all"]), default="fraction", show_default=True,
              help="A group row's score: the fraction of its tasks correct, or 1 only when all are.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Wall-clock seconds per program call.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--allow-weak-sandbox", is_flag=True,
              help="Grade even where the sandbox's isolation is below 'full' (it says what is then unprotected).")
def score(data: Path, responses: Path, out: Path, mode: str, workers: int, policy: str, group: str,
          timeout_s: float, no_plots: bool, allow_weak_sandbox: bool) -> None:
    """Grade RESPONSES against DATA in an isolated sandbox; write per-response scores and a summary."""
    from opgen.score.report import ScoreInputError, score_files
    from opgen.score.sandbox import SandboxError, allow_weak_for_this_process

    if allow_weak_sandbox:
        allow_weak_for_this_process()

    for path, opt in ((data, "--data"), (responses, "--responses")):
        if not path.is_file():
            raise click.BadParameter(f"{path} does not exist or is not a file", param_hint=opt)
    try:
        summary = score_files(data, responses, out, mode=mode, workers=workers, policy=policy, group=group,
                              timeout_s=timeout_s, plots=not no_plots)
    except ScoreInputError as exc:
        raise click.ClickException(str(exc)) from None
    except SandboxError as exc:
        raise click.ClickException(f"sandbox failure: {exc}") from None
    o = summary["overall"]
    click.echo(f"{summary['responses']} responses over {summary['rows_answered']} of {summary['rows']} rows: "
               f"accuracy {o['acc']:.4f} [{o['ci_low']:.4f}, {o['ci_high']:.4f}]  isolation {summary['isolation']}")
    if summary["rows_without_response"]:
        click.echo(f"{summary['rows_without_response']} rows have no response")
    if summary["pass_at_k"]:
        click.echo("  ".join(f"{k} {v:.4f}" for k, v in summary["pass_at_k"].items()))
    click.echo("errors: " + json.dumps(summary["errors"]))
    click.echo(f"wrote {out}/scores.jsonl, summary.json, summary.csv" +
               "".join(f", {p}" for p in summary["plots"]))
