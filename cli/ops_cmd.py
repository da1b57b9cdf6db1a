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
    """Inspect the 25 operators: list them, show their source, evaluate expressions, check a library's laws."""


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
@click.option("--library", "library_spec", metavar="SPEC",
              help="The library: a YAML file, module:obj naming an OperatorLibrary, or 'study' (same as LIB).")
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
