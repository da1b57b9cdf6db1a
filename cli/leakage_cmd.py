"""`opgen leakage`: the study's leakage rule across separate builds (training cells vs eval files)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import click

from . import options

# Without --progress/--no-progress, a line per file read goes to stderr on a terminal, or anywhere
# once the check has run this long (a log of a long check shows it is moving).
PROGRESS_AFTER_S = 2.0


def _check_writable(path: Path) -> None:
    """Refuse a --report path that cannot be written, before any file is read."""
    if path.is_dir():
        raise click.BadParameter(f"{path}: is a folder (give a file name)", param_hint="--report")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise click.BadParameter(f"{path}: no such folder {parent}", param_hint="--report")
    if path.exists() and not os.access(path, os.W_OK):
        raise click.BadParameter(f"{path}: not writable", param_hint="--report")
    # the report is written as a sibling temporary file renamed over it: try one now
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise click.BadParameter(f"{path}: cannot write in {parent} ({exc.strerror or exc})",
                                 param_hint="--report") from None
    os.close(fd)
    os.unlink(tmp)


def _split_paths(paths: tuple[str, ...]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
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
    for p in (*train, *against):
        if not p.exists():
            raise click.BadParameter(f"{p}: no such file or folder", param_hint="TRAIN" if p in train else "--against")
    return train, against


def _print(report: dict) -> None:
    for pair in report["pairs"]:
        c = pair["checked"]
        click.echo(f"{pair['train']} × {pair['eval']}: checked {c['prompts']} prompts, {c['tasks']} tasks, "
                   f"{c['heldout_compositions']} held-out compositions; shared prompt {pair['prompt']}, "
                   f"task {pair['task']}, held-out composition {pair['heldout_program']} "
                   f"(train-operator compositions also in this file: {pair['shared_composition_rows']} rows)")
    for t in report["train_files"]:
        click.echo(f"{t['train']}: {t['rows']} training rows, {t['heldout_composed']} compose a held-out operator")
    for path, per_depth in report["program_share"].items():
        shown = " · ".join(f"{d} {v['in_training']}/{v['tasks']} ({v['share']:.0%})" for d, v in per_depth.items())
        click.echo(f"{path}: programs also in training, per depth (information): {shown}")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("paths", nargs=-1, type=click.UNPROCESSED, metavar="TRAIN_PATH... --against EVAL_PATH...")
@click.option("--heldout-ops", default="heldout", show_default=True,
              help="The held-out operators that training may not compose: heldout (the held-out operators of "
                   "the library the rows name), or a comma list of its operator ids.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the whole report as JSON here (checked writable before the work).")
@options.progress(heartbeat=False)  # it prints its own lines (tell, below)
@options.library()
def leakage(paths: tuple[str, ...], heldout_ops: str, report_path: Path | None, progress: bool | None,
            library_spec: str | None) -> None:
    """Check training build folders or parquet files against eval ones (those after --against):
    no shared prompt, no shared (program, input) task, no held-out composition's program in
    training, and no held-out operator composed in training. Exit 1 on a violation. Also reports,
    as information, the share of each eval file's programs per depth that occur in training
    (train-operator programs recur in ID evals as in the study)."""
    from opgen import files
    from opgen import leakage as L

    train, against = _split_paths(paths)
    if report_path is not None:
        _check_writable(report_path)
    chosen = options.chosen_library(library_spec)
    lib = L.rows_library(train, against, chosen)  # LeakageInputError: exit 1; UnknownLibrary: 2 (cli/__init__.py)
    try:
        held = lib.resolve_set(heldout_ops if heldout_ops in ("heldout", "train", "all") else heldout_ops.split(","))
    except (ValueError, KeyError) as exc:
        raise click.BadParameter(str(exc), param_hint="--heldout-ops") from None
    t0 = time.monotonic()

    def tell(done: int, total: int, path: str, rows: int) -> None:
        elapsed = time.monotonic() - t0
        if progress or (progress is None and (sys.stderr.isatty() or elapsed >= PROGRESS_AFTER_S)):
            click.echo(f"leakage: read {done}/{total} files ({path}: {rows:,} rows, {elapsed:.1f} s)", err=True)
            sys.stderr.flush()

    # LeakageInputError: exit 1 (cli/__init__.py)
    report = L.check_files(train, against, held, progress=tell, library=chosen)
    _print(report)
    if report_path is not None:
        try:
            files.atomic_write_text(report_path, json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            raise click.ClickException(f"--report: {files.describe_os_error(exc, str(report_path))}") from None
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
