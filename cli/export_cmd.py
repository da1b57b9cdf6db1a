"""``opgen export lm-eval BUILD_DIR OUT_DIR``: task files of a build for other harnesses."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def export() -> None:
    """Write a build's tasks in another harness's form."""


@export.command("lm-eval")
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--max-gen-toks", type=click.IntRange(1, 1_000_000), default=2048, show_default=True)
@click.option("--group", default="opgen", show_default=True, help="The lm-eval group name (and task prefix).")
def lm_eval(build_dir: Path, out_dir: Path, max_gen_toks: int, group: str) -> None:
    """One lm-eval task YAML per split, a group YAML and utils.py (docs/integrations.md). A build of
    a library not the study's exports only when its grader will find the library (your library
    store, or OPGEN_LIBRARY): opgen ops add BUILD_DIR/library.yaml registers it."""
    from opgen.integrations.lm_eval import export as write

    try:  # a HubError: the CLI's one mapping (cli/__init__.py)
        paths = write(build_dir, out_dir, max_gen_toks=max_gen_toks, group=group)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{len(paths)} files -> {out_dir} (lm_eval --include_path {out_dir} --tasks {group})")
