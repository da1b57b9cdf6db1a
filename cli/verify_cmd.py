"""`opgen verify`: check a build against its manifest, rebuild it from the manifest and compare, split by split."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import options


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes for the rebuild (the files are the same for any number).")
@options.progress()
@options.json_output("Print a JSON report: every check with its scope, status (passed, failed, skipped) and detail.")
@options.library()
def verify(build_dir: Path, workers: int, progress: bool | None, as_json: bool, library_spec: str | None) -> None:
    """Check BUILD_DIR against its manifest, rebuild it from the manifest (recipes, seed, limit) in a
    temporary directory and compare.

    Build-wide: the manifest's fields are well-formed, its seed is the recipes', each recipe file
    found from here has the recorded sha256, the folder's library file (a library not the study's)
    has the manifest's digest, and the folder holds the manifest's files and nothing else. The
    rebuild uses the library the manifest names, found by its digest (--library, else your library
    store); nothing in the folder is run. Per split: each file's size, sha256 and rows are the
    manifest's; the split digest is the recipe's; the content digest of the files, the manifest's
    and the rebuild's agree (rows in order, canonically serialized: docs/recipes.md,
    "Reproducibility"); and where the manifest's opgen and pyarrow versions are this machine's, the
    rebuild's bytes are the manifest's (elsewhere that check is skipped, and says so). Exits 1 on
    any failed check, 2 on a malformed manifest.
    """
    from opgen import outdir
    from opgen import verify as V

    outdir.install_sigterm()
    try:
        report = V.verify(build_dir, workers=workers, progress=options.show_progress(progress),
                          library=options.chosen_library(library_spec))
    except V.VerifyError as exc:
        raise click.BadParameter(str(exc), param_hint="BUILD_DIR") from None
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        click.echo(V.render(report))
    if not report.ok:
        failed = [c for c in report.all_checks() if c.status == V.FAILED]
        bad_splits = sum(not s.ok for s in report.splits)
        raise click.ClickException(f"{len(failed)} check{'s' * (len(failed) != 1)} failed "
                                   f"({bad_splits} of {len(report.splits)} splits do not match)")
