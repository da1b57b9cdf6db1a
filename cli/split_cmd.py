"""`opgen split-stats`: atom and compound divergence of a training set against an eval set (docs/splits.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import options


@click.command("split-stats")
@click.argument("train", type=click.Path(path_type=Path))
@click.argument("eval_", metavar="EVAL", type=click.Path(path_type=Path))
@options.json_output("Print the report as JSON (every held-out compound).")
@click.option("--max-size", type=click.IntRange(2, 4), default=2, show_default=True,
              help="Largest compound in nodes: 2 = parent→child edges; 3-4 add bigger connected fragments "
                   "(weighted as in DBCA).")
@click.option("--leaves", is_flag=True, help="Count the input x and literal kinds as atoms (and compound ends).")
@click.option("--inputs", is_flag=True, help="Count each task's input length class as an atom.")
@options.progress()
@options.library()
def split_stats(train: Path, eval_: Path, as_json: bool, max_size: int, leaves: bool, inputs: bool,
                progress: bool | None, library_spec: str | None) -> None:
    """Atom divergence D_A = 1 - C_0.5 and compound divergence D_C = 1 - C_0.1 (Chernoff coefficients of
    the normalized histograms, DBCA) of TRAIN against EVAL, and the held-out compounds (in eval, in no
    training row) with their share of eval rows. TRAIN and EVAL are build folders or parquet files."""
    from opgen.splits import compounds as C
    from opgen.splits import report

    for p, hint in ((train, "TRAIN"), (eval_, "EVAL")):
        if not p.exists():
            raise click.BadParameter(f"{p}: no such file or folder", param_hint=hint)
    result = report.split_stats([train], [eval_], C.CompoundSpec(max_size, leaves, inputs),
                                options.chosen_library(library_spec))  # SplitRowsError: exit 1
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(report.render_split_stats(result))
