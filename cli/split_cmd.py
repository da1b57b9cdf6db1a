"""`opgen split-stats`: atom and compound divergence of a training set against an eval set; `opgen split-sweep`:
splits of one pool at increasing compound divergence, each built with its certificate (docs/splits.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import options


@click.command("split-stats")
@click.argument("train", type=click.Path(path_type=Path))
@click.argument("eval_", metavar="EVAL", type=click.Path(path_type=Path))
@options.json_output("Print the report as JSON (every held-out compound).")
@click.option("--max-size", type=click.IntRange(2, 4), default=3, show_default=True,
              help="Largest compound in nodes: 2 = parent→child edges only; 3-4 add bigger connected fragments "
                   "(weighted as in DBCA).")
@click.option("--leaves", is_flag=True, help="Count the input x and literal kinds as atoms (and compound ends).")
@click.option("--inputs", is_flag=True, help="Count each task's input length class as an atom.")
@click.option("--params", is_flag=True, help="Count each parameterised call's parameters as an atom (func_1=2).")
@click.option("--depths", is_flag=True, help="Count each task's depth as an atom (depth:3).")
@click.option("--atoms-per", type=click.Choice(["occurrence", "row"]), default="occurrence", show_default=True,
              help="An atom adds 1 per node, or once per row holding it.")
@click.option("--compounds-per", type=click.Choice(["row", "occurrence"]), default="row", show_default=True,
              help="A compound adds its largest weight in a row (DBCA's w(G, u)), or every occurrence's.")
@click.option("--baseline-seeds", type=click.IntRange(0, 100), default=5, show_default=True,
              help="Random splits of the same rows pooled, at the same sizes, to compare with (0: none).")
@options.progress()
@options.library()
def split_stats(train: Path, eval_: Path, as_json: bool, max_size: int, leaves: bool, inputs: bool, params: bool,
                depths: bool, atoms_per: str, compounds_per: str, baseline_seeds: int, progress: bool | None,
                library_spec: str | None) -> None:
    """Atom divergence D_A = 1 - C_0.5 and compound divergence D_C = 1 - C_0.1 (Chernoff coefficients of
    the normalized histograms, DBCA) of TRAIN against EVAL, beside random splits of the same rows, and
    the held-out compounds (in eval, in no training row) with their share of eval rows. TRAIN and
    EVAL are build folders or parquet files."""
    from opgen.splits import compounds, report

    for p, hint in ((train, "TRAIN"), (eval_, "EVAL")):
        if not p.exists():
            raise click.BadParameter(f"{p}: no such file or folder", param_hint=hint)
    spec = compounds.CompoundSpec(max_size, leaves, inputs, params, depths, atoms_per, compounds_per)
    result = report.split_stats([train], [eval_], spec, baseline_seeds,
                                options.chosen_library(library_spec))  # SplitRowsError: exit 1
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(report.render_split_stats(result))


def _levels(ctx: click.Context, param: click.Parameter, value: str | None) -> list[float] | None:
    if value is None:
        return None
    try:
        return [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give compound divergences separated by commas (0.2,0.4)") from None


@click.command("split-sweep")
@click.argument("recipe")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The sweep's folder: one build per split (LEVEL/split-K/rows), sweep.json/.csv/.md and sweep.svg.")
@click.option("--per-level", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Splits per level (other searches of the same pool).")
@click.option("--step", type=click.FloatRange(0.01, 1.0), default=0.1, show_default=True,
              help="The levels' spacing in D_C, from the random split's up to the highest the search reaches.")
@click.option("--levels", callback=_levels, metavar="D_C,...",
              help="Target compound divergences instead of the steps (the random level is always built).")
@click.option("--max-atom-divergence", type=click.FloatRange(0.0, 1.0), default=0.02, show_default=True,
              help="The atom divergence every split stays within (DBCA's CFQ splits: 0.02).")
@click.option("--seed", type=click.IntRange(min=0), help="Override the recipe's seed (its pool and searches).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Build workers per split.")
@click.option("--force", is_flag=True, help="Write into --out even if it holds files already.")
def split_sweep(recipe: str, out: Path, per_level: int, step: float, levels: list[float] | None,
                max_atom_divergence: float, seed: int | None, workers: int, force: bool) -> None:
    """CFQ's divergence sweep of an mcd RECIPE (a YAML file or a bundled name): a random split of its
    pool and, for every level from the first multiple of --step above the random split's compound
    divergence to the highest the exchange search reaches, --per-level splits with that target, each a
    normal build with its certificate. Prints the table (D_C, D_A, the random baseline and the excess
    per split) and the highest D_C reached beside CFQ's MCD splits; writes sweep.svg beside it."""
    from opgen import recipe as R
    from opgen.splits import sweep

    try:
        loaded = R.load(recipe, seed)
    except R.RecipeError as exc:
        raise click.BadParameter(str(exc), param_hint="RECIPE") from None
    if loaded.split is None or loaded.split.kind != "mcd":
        raise click.BadParameter(f"{loaded.path}: a divergence sweep needs a recipe with an mcd split (this one's: "
                                 f"{loaded.split.kind if loaded.split else 'none'})", param_hint="RECIPE")
    if out.exists() and not out.is_dir():
        raise click.BadParameter(f"{out}: not a folder", param_hint="--out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise click.BadParameter(f"{out}: not empty (pass --force to write the sweep into it)", param_hint="--out")
    report = sweep.run(loaded, out, per_level=per_level, bound=max_atom_divergence, step=step, levels=levels,
                       workers=workers, say=lambda line: click.echo(line, err=True))
    click.echo(sweep.render(report))
    click.echo(f"written: {out / 'sweep.json'}, sweep.csv, sweep.md, sweep.svg")
