"""`opgen verify`: rebuild a build from its manifest and compare content (and bytes) split by split."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import options


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes for the rebuild (the files are the same for any number).")
@options.json_output()
def verify(build_dir: Path, workers: int, as_json: bool) -> None:
    """Rebuild BUILD_DIR from its manifest (recipes, seed, limit) in a temporary directory and compare.

    Per split: the content digest of the files in BUILD_DIR, the manifest's and the rebuild's must
    agree (rows in order, canonically serialized: docs/recipes.md, "Reproducibility"); where the
    manifest's opgen and pyarrow versions are this machine's, the files' bytes must too. Exits 1 on
    any mismatch.
    """
    from opgen import outdir
    from opgen import verify as V

    outdir.install_sigterm()
    try:
        report = V.verify(build_dir, workers=workers)
    except V.VerifyError as exc:
        raise click.BadParameter(str(exc), param_hint="BUILD_DIR") from None
    if as_json:
        click.echo(json.dumps({"build_dir": report.build_dir, "ok": report.ok, "versions_then": report.versions_then,
                               "versions_now": report.versions_now,
                               "splits": [{"name": s.name, "ok": s.ok, "content_sha256": s.content,
                                           "bytes_compared": s.bytes_compared, "problems": s.problems}
                                          for s in report.splits]}, indent=2))
    else:
        click.echo(V.render(report))
    if not report.ok:
        raise click.ClickException(f"{sum(not s.ok for s in report.splits)} of {len(report.splits)} splits "
                                   f"do not match their rebuild")
