"""`opgen ops`: look at the operator library."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Iterator

import click

from opgen import expr
from opgen import ops as library

from . import options


@click.group()
def ops() -> None:
    """Inspect the 25 operators: list them, show their source, evaluate expressions, check a library's laws;
    register the operator libraries you trust in your library store (add, libraries, remove)."""


def _op_row(op: library.Operator) -> dict:
    return {
        "id": op.id,
        "name": op.name,
        "arity": op.arity,
        "signature": op.signature,
        "params": [p.describe() for p in op.params],
        "split": op.split,
        "gloss": op.gloss,
    }


@ops.command("list")
@options.json_output("Print a JSON array instead of a table.")
@click.option("--split", type=click.Choice(["train", "heldout"]), help="Only operators of this split.")
def list_cmd(as_json: bool, split: str | None) -> None:
    """A table of the operators: id, name, arity, params, split, gloss."""
    rows = [_op_row(op) for op in library.OPERATORS if split is None or op.split == split]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    header = ["id", "name", "arity", "params", "split", "gloss"]
    table = [[r["id"], r["name"], str(r["arity"]), "; ".join(r["params"]) or "-", r["split"], r["gloss"]]
             for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for t in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())


@ops.command("show")
@click.argument("op_id")
def show_cmd(op_id: str) -> None:
    """Print an operator's shown source (and nothing else)."""
    try:
        op = library.get(op_id)
    except library.UnknownOperator as exc:
        raise click.BadParameter(str(exc), param_hint="OP_ID") from None
    click.echo(op.source, nl=False)


@ops.command("eval", short_help="Evaluate an expression such as func_3(func_1(x, 2)) on --input.")
@click.argument("expression")
@click.option("--input", "input_", required=True, help="The value of x.")
@options.json_output("Print the result and measures as JSON.")
@click.option("--max-len", type=click.IntRange(min=0), default=1_000_000, show_default=True,
              help="Refuse any intermediate value longer than this many characters (0: no limit).")
@click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Give up after this many seconds (0: never), e.g. func_19(x, 10**12) loops that often.")
def eval_cmd(expression: str, input_: str, as_json: bool, max_len: int, timeout: float) -> None:
    """Parse EXPRESSION (e.g. "func_3(func_1(x, 2))"), evaluate it on --input, print the result."""
    if not _utf8_encodable(expression):
        at = next(i for i, ch in enumerate(expression) if not _utf8_encodable(ch))
        raise click.BadParameter(f"character {at + 1} is not valid UTF-8 (byte 0x{ord(expression[at]) & 0xFF:02x}); "
                                 f"an expression is UTF-8 text", param_hint="EXPRESSION")
    try:
        tree = expr.parse(expression)
    except expr.ExprError as exc:
        raise click.BadParameter(str(exc), param_hint="EXPRESSION") from None
    try:
        with expr.recursion_headroom(), _deadline(timeout):
            # The limit stops `func_1(x, 10**9)` before it allocates gigabytes it would then print.
            value = expr.evaluate(tree, input_, max_len=max_len or None)
    except _TimedOut:
        raise click.ClickException(f"evaluation failed: still running after {timeout:g}s (see --timeout)") from None
    except expr.OutputTooLong as exc:
        raise click.ClickException(f"evaluation failed: {exc} (raise --max-len to allow it)") from None
    except Exception as exc:  # an operator failing on this input is the user's answer, not a crash
        raise click.ClickException(f"evaluation failed: {type(exc).__name__}: {exc}") from None
    if as_json:
        record = {
            "expression": expr.render(tree), "input": input_, "output": value,
            "depth": expr.depth(tree), "k": expr.k_distinct(tree), "ops": list(expr.ops_used(tree)),
        }
        text = json.dumps(record, ensure_ascii=False)
        if not _utf8_encodable(text):
            # A lone surrogate (from a literal like '\ud800') has no UTF-8 form; JSON can escape it.
            text = json.dumps(record)
        click.echo(text)
        return
    try:
        # surrogateescape gives back the exact bytes of an --input that was not valid UTF-8.
        data = (value + "\n").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise click.ClickException(
            "the result contains a lone surrogate, which UTF-8 cannot encode; use --json to see it escaped"
        ) from None
    click.echo(data, nl=False)


class _TimedOut(BaseException):  # not an Exception: no handler on the way may swallow it
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the evaluation after ``seconds``: the operators' loops run their parameter's count
    of iterations, so a huge parameter is a hang, not an error, without this."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _CheckSetupError(click.ClickException):
    exit_code = 2


@ops.command("check", short_help="Property laws for an operator library (the study's by default).")
@click.argument("lib", required=False, metavar="[LIB]")
@options.library("The library: a YAML file, module:obj naming an OperatorLibrary, or 'study' (same as LIB).")
@click.option("--examples", type=click.IntRange(min=1), default=100, show_default=True,
              help="Hypothesis examples per law per operator.")
@click.option("--seed", type=int, default=0, show_default=True, help="Hypothesis's seed (a run is deterministic).")
@options.json_output("Print the report as JSON.")
@options.progress()
def check_cmd(lib: str | None, library_spec: str | None, examples: int, seed: int, as_json: bool,
              progress: bool | None) -> None:
    """Check LIB's operators against opgen's laws (docs/operators.md, "opgen ops check"): each source
    runs standalone and equals the operator; total; deterministic; pure; out_len and cost bounds hold;
    recursion within the limit. Exit 0 when every law holds, 1 with shrunk counterexamples otherwise."""
    from opgen import library as libraries
    from opgen import opscheck

    if lib is not None and library_spec is not None and lib != library_spec:
        raise click.UsageError("give the library once: as LIB or as --library")
    spec = lib or library_spec or "study"
    try:
        chosen = libraries.load(spec)
    except libraries.LibraryError as exc:
        raise click.BadParameter(str(exc), param_hint="LIB") from None
    try:
        report = opscheck.check(chosen, examples=examples, seed=seed)
    except opscheck.MissingHypothesis as exc:
        raise _CheckSetupError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(report.render())
    if not report.ok:
        raise SystemExit(1)


@ops.command("add", short_help="Register an operator library you trust in your library store.")
@click.argument("spec", metavar="SPEC")
def add_cmd(spec: str) -> None:
    """Register the library SPEC (a YAML library file, such as a build folder's library.yaml, or
    module:obj) in your library store, by its content digest: every command and entry point then
    finds rows of that library from anywhere, with no flag. Its code is yours to vouch for: opgen
    runs it when it grades, builds or checks such rows (docs/security.md). The store is
    $OPGEN_HOME/libraries, else $XDG_DATA_HOME/opgen/libraries (~/.local/share/opgen/libraries)."""
    from opgen import library as libraries

    try:
        lib = libraries.load(spec)
    except libraries.LibraryError as exc:
        raise click.BadParameter(str(exc), param_hint="SPEC") from None
    if lib.is_study:
        click.echo(f"{spec}: the study's library is built in; nothing to register")
        return
    path = libraries.store.add(lib)  # a LibraryError (a store of another user's): exit 2 (cli/__init__.py)
    click.echo(f"registered library {lib.name!r} ({len(lib)} operators), digest {lib.digest}, as {path}")


@ops.command("libraries", short_help="The operator libraries in your library store.")
@options.json_output("Print a JSON array: digest, name, operators, path.")
def libraries_cmd(as_json: bool) -> None:
    """List the libraries you registered (opgen ops add, every build): digest, name, operators."""
    from opgen.library import store

    found = store.entries()
    if as_json:
        click.echo(json.dumps([{"digest": e.digest, "name": e.name, "operators": e.operators, "path": str(e.path)}
                               for e in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo(f"no libraries registered in {store.root()} (opgen ops add FILE; every build registers its own)")
        return
    for e in found:
        click.echo(f"{e.digest[:12]}  {e.name}  ({e.operators} operators)")
    click.echo(f"{len(found)} in {store.root()}")


@ops.command("remove", short_help="Remove an operator library from your library store.")
@click.argument("digest", metavar="DIGEST")
def remove_cmd(digest: str) -> None:
    """Remove the library whose digest starts with DIGEST (at least 6 hex digits) from your store."""
    from opgen.library import LibraryError, store

    try:
        gone = store.remove(digest)
    except LibraryError as exc:
        raise click.BadParameter(str(exc), param_hint="DIGEST") from None
    if not gone:
        raise click.BadParameter(f"no registered library's digest starts with {digest!r} (opgen ops libraries)",
                                 param_hint="DIGEST")
    for e in gone:
        click.echo(f"removed library {e.name!r}, digest {e.digest}")
