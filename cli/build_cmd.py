"""`opgen build`, `opgen validate`, `opgen stats`: recipes to verl parquet, and checks of parquet."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import click

from . import options

DEFAULT_RECIPE = "eval-suite"


def _workers_default() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@click.command()
@click.argument("recipes", nargs=-1)
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Build directory (default: out/<first recipe's name>).")
@click.option("--workers", type=click.IntRange(min=1), default=_workers_default, show_default="min(4, CPUs)",
              help="Worker processes (files are byte-identical for any number).")
@click.option("--seed", type=click.IntRange(min=0), help="Override the recipes' seed.")
@click.option("--only", multiple=True, metavar="SPLIT", help="Build only this split (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N rows per split (the first N rows).")
@options.library("The operator library of every recipe, replacing their library: (study, a YAML file or module:obj; "
                 "docs/operators.md). Default: each recipe's, else the study's. The build registers it in your "
                 "library store and keeps its canonical file as DIR/library.yaml.")
@options.progress()
@click.option("--tokenizer", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A local tokenizer folder: record prompt/answer token lengths in the manifest and "
                   "warn about prompts longer than a recipe's max_prompt_length (needs transformers).")
@options.executor("ray: run the shards as Ray tasks (files byte-identical to a local build; on several nodes "
                  "--out must be a shared filesystem).")
@options.ray_address()
@options.ray_num_cpus()
@options.op_budget("A call past it stops the build, naming the operator, its input, the split and the row "
                   "(docs/operators.md, \"When an operator misbehaves\").")
@click.option("--force", is_flag=True,
              help="Replace --out even if the opgen build there holds files its manifest does not list "
                   "(they are deleted with it) or, with --only, is a build of other recipes. Never replaces a "
                   "folder opgen did not write.")
@click.pass_context
def build(ctx: click.Context, recipes: tuple[str, ...], out: Path | None, workers: int, seed: int | None,
          only: tuple[str, ...], limit: int | None, library_spec: str | None, progress: bool | None,
          tokenizer: Path | None, executor: str, ray_address: str | None, ray_num_cpus: int | None,
          op_budget: float, force: bool) -> None:
    """Build every split of RECIPE... (YAML files or bundled names) as verl parquet in --out.

    With no RECIPE, builds the bundled evaluation suite (datasets/eval-suite.yaml). Writes
    DIR/<split>.parquet (or shards) and DIR/manifest.json with counts, sha256 and the leakage report.
    DIR is replaced whole and atomically (docs/recipes.md, "Output directory"); with --only, the
    other splits of a build of the same recipes are kept. SIGINT exits 130, SIGTERM 143, each after
    removing what the build had staged.
    """
    from opgen import build as B
    from opgen import outdir, recipe
    from opgen.library import StoreWarning

    specs = recipes or (DEFAULT_RECIPE,)
    try:
        loaded = [recipe.load(spec, seed, library_spec) for spec in specs]
    except recipe.RecipeError as exc:
        raise click.BadParameter(str(exc), param_hint="--library" if library_spec and "--library" in str(exc)
                                 else "RECIPE") from None
    out = out or Path("out") / loaded[0].name
    tok = _load_tokenizer(tokenizer) if tokenizer is not None else None  # fail before any work
    progress = options.show_progress(progress)
    outdir.install_sigterm()
    mapper = None
    try:
        if executor == "ray":
            from opgen.distributed.ray_executor import BuildMapper, RayOptions

            mapper = BuildMapper(loaded, only, limit, out, RayOptions(address=ray_address, num_cpus=ray_num_cpus))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", StoreWarning)
            man = B.build(loaded, out, workers=workers, only=only, limit=limit, seed=seed, progress=progress,
                          mapper=mapper, force=force, op_budget=op_budget)
        for w in said:  # the store's one line as the command's own; any other warning as Python shows it
            if issubclass(w.category, StoreWarning):
                click.echo(f"warning: {w.message}", err=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    except (KeyboardInterrupt, outdir.Terminated) as exc:
        what = "terminated" if isinstance(exc, outdir.Terminated) else "interrupted"
        kept = "holds this build (the signal came during its final swap)" if isinstance(exc, B.SignalAfterSwap) \
            else "is as it was before this build"
        click.echo(f"{what}; {out} {kept}", err=True)
        ctx.exit(outdir.exit_code(exc))
    except B.OnlyError as exc:
        raise click.BadParameter(str(exc), param_hint="--only") from None
    except recipe.RecipeError as exc:
        raise click.BadParameter(str(exc), param_hint="RECIPE") from None
    # a BuildError or a Ray task lost past its retries (RayError): the CLI's one mapping (cli/__init__.py)
    finally:
        if mapper is not None:
            mapper.close()
    click.echo(summary(man, out))
    if tok is not None:
        from opgen import tokens

        limits = [r.max_prompt_length for r in loaded if r.max_prompt_length is not None]
        report = tokens.attach_to_build(out, tok, max_prompt_length=min(limits) if limits else None)
        click.echo(tokens.render_report(report))
        for warning in report.get("warnings", []):
            click.echo(f"warning: {warning}", err=True)


def _load_tokenizer(path: Path):
    from opgen import tokens

    try:
        return tokens.load_tokenizer(path)
    except ImportError as exc:
        raise click.UsageError(f"--tokenizer: {exc}") from None
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--tokenizer") from None


def summary(man: dict, out: Path) -> str:
    header = ["split", "role", "rows", "files", "depth", "rejected", "max out"]
    table = []
    for name, s in man["splits"].items():
        depths = [int(d) for d in s["counts"]["depth"]]
        table.append([name, s["role"], f"{s['rows']:,}", str(len(s["files"])),
                      f"{min(depths)}-{max(depths)}" if depths else "-", f"{sum(s['rejections'].values()):,}",
                      str(s["output_length"]["max"])])
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    rows = sum(s["rows"] for s in man["splits"].values())
    secs = man.get("_seconds", 0.0)
    leak = man["leakage"]
    allowed = [v for v in leak["violations"] if v["allowed"]]
    if leak.get("nothing_to_check"):
        # one kind of split alone (an eval suite, one training cell): compare builds with `opgen leakage`
        said = "nothing to check (no eval×train pair, no train split; across builds: opgen leakage)"
    else:
        checked = leak.get("checked", {})
        said = (f"{'ok' if leak['ok'] else 'FAILED'} ({len(leak['checked_pairs'])} eval×train pairs, "
                f"held-out composition checked in {checked.get('heldout_composed_splits', 0)} train splits"
                + (f", {len(allowed)} allowed violations" if allowed else "") + ")")
    lines.append(f"{rows:,} rows in {secs:.1f} s ({rows / max(secs, 1e-9):,.0f} rows/s) → {out}/manifest.json; "
                 f"leakage: {said}")
    return "\n".join(lines)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@options.json_output()
@click.option("--sandbox-workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Sandbox processes for rows whose ref_code is not opgen's.")
@options.allow_weak_sandbox(help="Run foreign ref_code even where the sandbox's isolation is below 'full'.")
@options.progress()
@options.library()
def validate(paths: tuple[Path, ...], as_json: bool, sandbox_workers: int, allow_weak_sandbox: bool,
             progress: bool | None, library_spec: str | None) -> None:
    """Check parquet files (or build directories) against the row schemas and re-execute every ground truth.

    opgen rows are re-derived from their parsed expressions; other verl rows' ref_code runs in the
    scorer's sandbox. Exits 1 naming the failing rows.
    """
    from opgen import validate as V

    files = V.expand(list(paths))
    if not files:
        raise click.BadParameter("no parquet files found", param_hint="PATHS")
    from opgen.score.sandbox import SandboxError, allow_weak_for_this_process

    if allow_weak_sandbox:
        allow_weak_for_this_process()
    runner = V.sandbox_runner(workers=sandbox_workers)
    chosen = options.chosen_library(library_spec)
    tick, done = options.counter(progress, "validate", V.count_rows(files), "row")
    try:
        reports = [V.validate_file(f, runner, tick, chosen) for f in files]
    except SandboxError as exc:
        raise click.ClickException(f"sandbox failure: {exc}") from None
    finally:
        done()
    manifest_problems = [m for p in paths if p.is_dir() for m in V.check_manifest(p)]
    if as_json:
        click.echo(json.dumps([{"path": r.path, "kind": r.kind, "rows": r.rows, "ok": r.ok, "error": r.error,
                                "failed_rows": r.n_failed,
                                "failures": [{"row": i, "problem": m} for i, m in r.failures]}
                               for r in reports], indent=2))
    else:
        for r in reports:
            if r.error:
                click.echo(f"FAIL {r.path}: {r.error}")
            elif r.n_failed:
                click.echo(f"FAIL {r.path}: {r.n_failed} of {r.rows} rows ({r.kind})")
                for i, m in r.failures:
                    click.echo(f"  row {i}: {m}")
                if r.n_failed > len(r.failures):
                    click.echo(f"  … and {r.n_failed - len(r.failures)} more")
            else:
                click.echo(f"ok   {r.path}: {r.rows} rows ({r.kind})")
    for problem in manifest_problems:
        click.echo(f"FAIL {problem}")
    bad = [r for r in reports if not r.ok]
    if bad or manifest_problems:
        raise click.ClickException(validation_summary(len(bad), len(reports), len(manifest_problems)))


def validation_summary(failed: int, files: int, problems: int) -> str:
    """``opgen validate``'s failure line in plain words: how many files failed, and whether the build
    disagrees with its manifest (each problem is listed above it)."""
    files_s = f"{files} file{'' if files == 1 else 's'}"
    if failed:
        head = f"{failed} of {files_s} failed validation"
    else:
        head = "the file passed validation" if files == 1 else f"all {files_s} passed validation"
    if not problems:
        return head
    tail = (f"the build does not match its manifest ({problems} problem{'' if problems == 1 else 's'}, "
            f"listed above)")
    return f"{head}, and {tail}" if failed else f"{head}, but {tail}"


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@options.json_output("Print the counts as JSON.")
@click.option("--tokenizer", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A local tokenizer folder: also report prompt and gold-answer token lengths per split and "
                   "recommend verl's data.max_prompt_length / max_response_length (needs transformers).")
@click.option("--max-prompt-length", type=click.IntRange(min=1),
              help="With --tokenizer: warn about prompts longer than this many tokens.")
@options.progress()
@options.library()
def stats(paths: tuple[Path, ...], as_json: bool, tokenizer: Path | None, max_prompt_length: int | None,
          progress: bool | None, library_spec: str | None) -> None:
    """Counts (depth, k, operators, structure, conditions) and output-length histograms of parquet files.

    PATHS are parquet files or build directories. With --tokenizer, token lengths are measured the
    way verl measures them (chat template plus generation prompt): per split of a build directory
    (its manifest names the splits), per file otherwise.
    """
    from opgen import stats as S
    from opgen import validate as V

    files = V.expand(list(paths))
    if not files:
        raise click.BadParameter("no parquet files found", param_hint="PATHS")
    if max_prompt_length is not None and tokenizer is None:
        raise click.UsageError("--max-prompt-length needs --tokenizer")
    token_report = None
    if tokenizer is not None:
        from opgen import tokens

        tok = _load_tokenizer(tokenizer)
        builds = [p for p in paths if p.is_dir() and (p / "manifest.json").is_file()]
        loose = [p for p in paths if p not in builds]
        try:
            token_report = {str(b): tokens.build_token_report(b, tok, max_prompt_length=max_prompt_length)
                            for b in builds}
            if loose:
                token_report["files"] = tokens.files_token_report(V.expand(loose), tok,
                                                                  max_prompt_length=max_prompt_length)
        except (OSError, ValueError, KeyError) as exc:
            raise click.ClickException(f"token statistics failed: {exc}") from None
    try:
        result = S.collect(files, options.chosen_library(library_spec))
    except S.StatsError as exc:
        raise click.ClickException(f"cannot read {exc}") from None
    if as_json:
        result.pop("lengths")
        if token_report is not None:
            result["tokens"] = token_report
        click.echo(json.dumps(result, indent=2, default=str))
    else:
        click.echo(S.render(result))
        if token_report is not None:
            from opgen import tokens

            for report in token_report.values():
                click.echo(tokens.render_report(report))
