"""`opgen push`: publish a build to the Hugging Face Hub as a multi-config dataset (opgen.hub)."""

from __future__ import annotations

from pathlib import Path

import click

from . import options


def _repo_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from opgen import hub

    try:
        return hub.check_repo_id(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("build_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repo-id", required=True, callback=_repo_id, help="The dataset repository, ORG/NAME.")
@click.option("--private", is_flag=True, help="Create the repository as private (when it does not exist yet).")
@click.option("--revision", metavar="BRANCH", help="Commit to this branch (created from main when missing).")
@click.option("--dry-run", "dry_run", type=click.Path(file_okay=True, path_type=Path), metavar="OUT_DIR",
              help="Write the exact tree to OUT_DIR (a new or empty directory) and upload nothing.")
@click.option("--force", is_flag=True,
              help="With --dry-run: replace a tree an earlier dry run wrote in OUT_DIR. Never replaces a folder "
                   "opgen did not write.")
@click.option("--license", "license_", default="apache-2.0", show_default=True,
              help="License identifier for the card's front matter.")
@click.option("--pretty-name", help="Title of the card (default: opgen + the recipe names).")
@options.progress()
@options.library("The build's operator library, if you trust it, for the card (a YAML file or module:obj; "
                 "default: the library the manifest names by its digest, from your library store; nothing in the "
                 "folder is run).")
@click.pass_context
def push(ctx: click.Context, build_dir: Path, repo_id: str, private: bool, revision: str | None,
         dry_run: Path | None, force: bool, license_: str, pretty_name: str | None, progress: bool | None,
         library_spec: str | None) -> None:
    """Publish BUILD_DIR (written by `opgen build`) to the Hub in one commit.

    Each split family becomes a config with its files at data/<config>/<split>-0000k-of-0000n.parquet,
    next to a generated dataset card (README.md) and the build's manifest.json. Every file is checked
    against the sha256 in the manifest first: a build that changed since it was written is refused.
    The token comes from HF_TOKEN or the login cache (`hf auth login`).

    --dry-run's OUT_DIR is locked while the tree is staged beside it and swapped in whole (as every
    command that writes does); SIGINT exits 130, SIGTERM 143, OUT_DIR as it was.
    """
    from opgen import hub, outdir

    if force and dry_run is None:
        raise click.UsageError("--force: only with --dry-run (a push replaces nothing locally)")
    chosen = options.chosen_library(library_spec)
    outdir.install_sigterm()
    try:
        if dry_run is not None:
            plan = hub.write_tree(build_dir, dry_run, repo_id, license=license_, pretty_name=pretty_name,
                                  force=force, library=chosen)
            files = hub.tree_files(dry_run)
            click.echo(f"wrote {options.count(len(files), 'file')} ({options.count(len(plan.configs), 'config')}, "
                       f"{options.count(sum(s.rows for s in plan.splits), 'row')}) to {dry_run}; nothing uploaded")
            for rel in files:
                click.echo(f"  {rel}")
            return
        result = hub.push(build_dir, repo_id, private=private, revision=revision,
                          license=license_, pretty_name=pretty_name, library=chosen)
    except (KeyboardInterrupt, outdir.Terminated) as exc:
        kept = "holds the new tree (the signal came during its final swap)" \
            if isinstance(exc, outdir.SignalAfterCommit) else "is as it was"
        where = f"; {dry_run} {kept}" if dry_run is not None else \
            "; the push stopped before or after its one commit (all of the tree or none of it)"
        click.echo(f"{'terminated' if isinstance(exc, outdir.Terminated) else 'interrupted'}{where}", err=True)
        ctx.exit(outdir.exit_code(exc))
    except OSError as exc:  # a full disk or read-only target for --dry-run; the tree is never half there
        from opgen.files import describe_os_error

        raise click.ClickException(f"{describe_os_error(exc, str(dry_run or build_dir))}; nothing was written"
                                   + (f" to {dry_run}" if dry_run is not None else "")) from None
    where = f"{repo_id}@{revision}" if revision else repo_id
    configs = options.count(len(result.plan.configs), "config")
    click.echo(f"pushed {options.count(len(result.files), 'file')} ({configs}) to {where} in one commit")
    if result.commit_url:
        click.echo(result.commit_url)
