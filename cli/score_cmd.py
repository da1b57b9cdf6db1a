"""`opgen score`: grade a file of model responses against a built parquet file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import click

from opgen import choices

from . import options


@click.command()
@click.option("--data", "data", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A parquet file of rows (one split, one shard) as `opgen build` writes them.")
@click.option("--responses", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help='JSONL: {"index": i, "response": "..."} or {"index": i, "responses": [...]} per line.')
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for scores.jsonl, summary.json, summary.csv and the plots.")
@click.option("--mode", type=click.Choice(choices.MODES), default="auto", show_default=True,
              help="auto follows each row's ground truth.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Sandbox worker processes.")
@click.option("--policy", type=click.Choice(choices.POLICIES), default="output", show_default=True,
              help="What a score rewards: the output alone, or the output and the expression's structure.")
@click.option("--group", "group", type=click.Choice(choices.GROUP_POLICIES), default="fraction", show_default=True,
              help="A group row's score: the fraction of its tasks correct, or 1 only when all are.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Wall-clock seconds per program call.")
@options.namespace()
@options.no_plots()
@click.option("--distance-edges", "distance_edges", default="40,150", show_default=True,
              help="Bucket edges (characters, increasing) of the arity-error table by name→argument distance.")
@options.metric_defs()
@options.executor("ray: sandbox actors of --workers workers each, spread over the cluster's nodes.")
@options.ray_address()
@options.ray_num_cpus()
@click.option("--sandbox-actors", type=click.IntRange(min=1), default=None,
              help="ray: sandbox actors (default: the cluster's CPUs / --workers).")
@options.no_static()
@click.option("--grade-processes", type=click.IntRange(min=1), default=None,
              help="Grading processes, where every response is parsed and graded (default: "
                   "OPGEN_GRADE_PROCESSES, else one per CPU up to 8). Grades are the same.")
@options.allow_weak_sandbox()
@options.progress()
@options.library()
@click.pass_context
def score(ctx: click.Context, data: Path, responses: Path, out: Path, mode: str, workers: int, policy: str,
          group: str, timeout_s: float, namespace: str, no_plots: bool, distance_edges: str, drift_call: str,
          pass_k: str, interval: str, executor: str,
          ray_address: str | None, ray_num_cpus: int | None, sandbox_actors: int | None,
          no_static: bool, grade_processes: int | None, allow_weak_sandbox: bool, progress: bool | None,
          library_spec: str | None) -> None:
    """Grade RESPONSES against DATA in an isolated sandbox; write per-response scores and a summary.

    The report is staged beside --out and swapped in whole (a rescore replaces it at once or not
    at all); --out is locked while it is written. SIGINT exits 130, SIGTERM 143, the folder as it was.
    """
    from opgen import outdir
    from opgen.score.metrics import MetricDefs
    from opgen.score.report import score_files
    from opgen.score.sandbox import Sandbox, SandboxError, allow_weak_for_this_process

    if allow_weak_sandbox:
        allow_weak_for_this_process()

    grading = settings_of(mode, policy, group, namespace, no_static, library_spec)
    edges = _distance_edges(distance_edges)
    for path, opt in ((data, "--data"), (responses, "--responses")):
        if not path.is_file():
            raise click.BadParameter(f"{path} does not exist or is not a file", param_hint=opt)
    _check_not_empty(responses)
    box: Sandbox | None = None
    outdir.install_sigterm()
    try:
        if executor == "ray":
            from opgen.distributed.ray_executor import RayOptions, RaySandbox

            # RaySandbox serves the part of Sandbox's interface that score_files uses (workers, level,
            # run_units, close); score_files is typed with the local Sandbox. A RayError: exit 1 (cli/__init__.py).
            box = cast(Sandbox, RaySandbox(workers, timeout_s, RayOptions(address=ray_address, num_cpus=ray_num_cpus),
                                           actors=sandbox_actors))
        summary = score_files(data, responses, out, workers=workers, settings=grading, timeout_s=timeout_s,
                              plots=not no_plots, distance_edges=edges, sandbox=box, processes=grade_processes,
                              metric_defs=MetricDefs(drift_call=drift_call, pass_k=pass_k, interval=interval),
                              progress=options.show_progress(progress))
    except (KeyboardInterrupt, outdir.Terminated) as exc:
        term = isinstance(exc, outdir.Terminated)
        kept = "holds the new report (the signal came during its final swap)" \
            if isinstance(exc, outdir.SignalAfterCommit) else "is as it was before this score"
        click.echo(f"{'terminated' if term else 'interrupted'}; {out} {kept}", err=True)
        ctx.exit(outdir.exit_code(exc))
    except SandboxError as exc:
        raise click.ClickException(f"sandbox failure: {exc}") from None
    except OSError as exc:  # reading the inputs (writing is ScoreOutputError: exit 1, cli/__init__.py)
        from opgen.files import describe_os_error

        raise click.ClickException(describe_os_error(exc)) from None
    finally:
        if box is not None:
            box.close()
    _report(summary, out)


def settings_of(mode: str, policy: str, group: str, namespace: str, no_static: bool, library_spec: str | None = None):
    """The grading record of `opgen score`'s options (built once; every grade of the run reads it).
    ``library_spec``: --library (loaded here: a LibraryError names the file, exit 2)."""
    from opgen.score.settings import GradeSettings

    return GradeSettings.resolve(mode=mode, policy=policy, group=group, namespace=namespace, static=not no_static,
                                 library=library_spec)


def _check_not_empty(responses: Path) -> None:
    """A responses file with no line is an error, not "accuracy 0.0" (a generation that wrote nothing)."""
    try:
        with open(responses, "rb") as fh:
            empty = not any(line.strip() for line in fh)
    except OSError as exc:
        from opgen.files import describe_os_error

        raise click.ClickException(describe_os_error(exc, str(responses))) from None
    if empty:
        raise click.ClickException(f"{responses}: no responses (the file is empty); nothing to score, no report "
                                   f"written")


def _distance_edges(text: str) -> tuple[int, ...]:
    """``--distance-edges``: increasing positive integers."""
    try:
        edges = tuple(int(e) for e in text.split(",") if e.strip())
    except ValueError:
        edges = ()
    if not edges or any(e <= 0 for e in edges) or list(edges) != sorted(set(edges)):
        raise click.BadParameter(f"{text!r}: expected increasing positive integers, e.g. 40,150",
                                 param_hint="--distance-edges")
    return edges


def _figure(p: dict) -> str:
    """An accuracy and its interval, or what stands for none (no response counted: never 0)."""
    if p.get("acc") is None:
        return "n/a (no response)"
    return f"{p['acc']:.4f} [{p['ci_low']:.4f}, {p['ci_high']:.4f}]"


def _report(summary: dict, out: Path) -> None:
    """The summary's lines on the terminal (the files are written)."""
    from opgen.score.report import missing_import_warning

    o = summary["overall"]
    click.echo(f"{summary['responses']} responses over {summary['rows_answered']} of {summary['rows']} rows: "
               f"accuracy {_figure(o)}  isolation {summary['isolation']}")
    if summary["rows_without_response"]:
        click.echo(f"{summary['rows_without_response']} rows have no response")
    if summary["pass_at_k"]:
        click.echo("  ".join(f"{k} {v:.4f}" for k, v in summary["pass_at_k"].items()))
    nd = summary["non_degenerate"]
    if summary["degenerate_rows"]:
        click.echo(f"non-degenerate rows: accuracy {_figure(nd)} over {nd['n']} responses "
                   f"({summary['degenerate_rows']} on degenerate rows)")
    click.echo("errors: " + json.dumps(summary["errors"]))
    if summary.get("retries"):
        click.echo(f"{summary['retries']} responses were graded again: the grading process or sandbox worker "
                   "under them died (summary.json 'retries'; a response graded 'killed' killed it twice)", err=True)
    warning = missing_import_warning(summary)
    if warning:
        click.echo(warning, err=True)
    if summary.get("plots_skipped"):
        click.echo(f"warning: {summary['plots_skipped']}", err=True)
    click.echo(f"wrote {out}/scores.jsonl, summary.json, summary.csv" +
               "".join(f", {p}" for p in summary["plots"]))
