"""`opgen leakage`: the study's leakage rule across separate builds (training cells vs eval files)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("paths", nargs=-1, type=click.UNPROCESSED, metavar="TRAIN_PATH... --against EVAL_PATH...")
@click.option("--heldout-ops", default="heldout", show_default=True,
              help="The held-out operators that training may not compose: heldout, or a comma list of func_N.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the whole report as JSON here.")
def leakage(paths: tuple[str, ...], heldout_ops: str, report_path: Path | None) -> None:
    """Check training build folders or parquet files against eval ones (those after --against):
    no shared prompt, no shared (program, input) task, no shared program with two or more calls,
    and no held-out operator composed in training. Exit 1 on a violation."""
    from opgen import leakage as L
    from opgen import ops

    if "--against" not in paths:
        raise click.UsageError("give the eval files after --against: opgen leakage TRAIN... --against EVAL...")
    at = paths.index("--against")
    train = tuple(Path(p) for p in paths[:at])
    against = tuple(Path(p) for p in paths[at + 1:] if p != "--against")
    unknown = [p for p in (*train, *against) if str(p).startswith("-")]
    if unknown:
        raise click.UsageError(f"no such option: {unknown[0]}")
    if not train or not against:
        raise click.UsageError("give at least one training path before --against and one eval path after it")
    try:
        held = ops.resolve_set(heldout_ops if heldout_ops in ("heldout", "train", "all") else heldout_ops.split(","))
    except (ValueError, KeyError) as exc:
        raise click.BadParameter(str(exc), param_hint="--heldout-ops") from None
    for p in (*train, *against):
        if not p.exists():
            raise click.BadParameter(f"{p}: no such file or folder", param_hint="TRAIN" if p in train else "--against")
    try:
        report = L.check_files(train, against, held)
    except L.LeakageInputError as exc:
        raise click.ClickException(str(exc)) from None
    for pair in report["pairs"]:
        click.echo(f"{pair['train']} × {pair['eval']}: checked {pair['checked']['prompts']} prompts, "
                   f"{pair['checked']['tasks']} tasks, {pair['checked']['multi_call_programs']} multi-call programs; "
                   f"shared prompt {pair['prompt']}, task {pair['task']}, program {pair['program']}")
    for t in report["train_files"]:
        click.echo(f"{t['train']}: {t['rows']} training rows, {t['heldout_composed']} compose a held-out operator")
    if report_path is not None:
        report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if report["nothing_to_check"]:
        click.echo("leakage: nothing to check")
    elif report["ok"]:
        click.echo(f"leakage: ok ({len(report['pairs'])} train×eval file pairs, {len(report['train_files'])} "
                   "training files, 0 violations)")
    else:
        for line in L.describe_files(report):
            click.echo("  " + line, err=True)
        click.echo(f"leakage: FAILED ({len(report['violations'])} violations)", err=True)
        raise SystemExit(1)
