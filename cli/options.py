"""Options several commands share, declared once: name, type, default and help live here.

Each is a decorator factory (``@options.namespace()``). Where a command's context changes what an
option means, the help says so through a parameter, not a second declaration: ``prefix`` names the
part of a command an option belongs to (``opgen eval``'s scorer options read "Scorer: ..."), and
``help`` replaces the text of the few options whose effect is the command's own (``--executor``,
``--json``, ``opgen validate --allow-weak-sandbox``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from opgen import choices

if TYPE_CHECKING:
    from opgen.library import OperatorLibrary

F = TypeVar("F", bound=Callable[..., Any])

NAMESPACE_HELP = ("strict runs programs on their own; native with what the native benchmark's module had "
                  "imported (gcd from math; see docs/scoring.md).")
NO_STATIC_HELP = ("Run every program in the sandbox (by default programs of library code only are evaluated "
                  "without running them, with the same grades; docs/scoring.md).")
ALLOW_WEAK_SANDBOX_HELP = "Grade even where the sandbox's isolation is below 'full' (it says what is then unprotected)."
RAY_ADDRESS_HELP = "ray: an existing cluster (e.g. auto, or ray://HOST:10001); default: start a local one on 127.0.0.1."
RAY_NUM_CPUS_HELP = "ray: CPUs of the local cluster started without --ray-address (default: this machine's)."
LIBRARY_HELP = ("The operator library the rows were built from, if you trust it: a YAML file or module:obj (default: "
                "the library the rows name by its digest, from your library store, where every build and "
                "`opgen ops add FILE` register one; nothing the data names is loaded).")


def count(n: int, noun: str, plural: str = "") -> str:
    """``1 config``, ``2 configs``, ``1,024 rows``: a count with its noun as a reader says it."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _prefixed(prefix: str, text: str) -> str:
    """``Scorer: run every ...`` from ``Run every ...``."""
    return f"{prefix}: {text[0].lower()}{text[1:]}" if prefix else text


def namespace(prefix: str = "") -> Callable[[F], F]:
    """``--namespace strict|native``: the names a graded program may use (opgen.score)."""
    return click.option("--namespace", type=click.Choice(choices.NAMESPACES), default="strict", show_default=True,
                        help=_prefixed(prefix, NAMESPACE_HELP))


def no_static(prefix: str = "") -> Callable[[F], F]:
    """``--no-static``: grade every program in the sandbox, none statically."""
    return click.option("--no-static", is_flag=True, help=_prefixed(prefix, NO_STATIC_HELP))


def allow_weak_sandbox(help: str = ALLOW_WEAK_SANDBOX_HELP) -> Callable[[F], F]:
    """``--allow-weak-sandbox``: run programs even below 'full' isolation (opgen.score.sandbox)."""
    return click.option("--allow-weak-sandbox", is_flag=True, help=help)


def executor(help: str) -> Callable[[F], F]:
    """``--executor local|ray``; ``help`` says what ray runs for this command."""
    return click.option("--executor", type=click.Choice(choices.EXECUTORS), default="local", show_default=True,
                        help=help)


def ray_address() -> Callable[[F], F]:
    """``--ray-address``: the cluster to join (opgen.distributed.ray_executor.RayOptions.address)."""
    return click.option("--ray-address", default=None, help=RAY_ADDRESS_HELP)


def ray_num_cpus() -> Callable[[F], F]:
    """``--ray-num-cpus``: CPUs of a local cluster (opgen.distributed.ray_executor.RayOptions.num_cpus)."""
    return click.option("--ray-num-cpus", type=click.IntRange(min=1), default=None, help=RAY_NUM_CPUS_HELP)


PROGRESS_HELP = ("Progress bars on stderr (default: on a terminal; elsewhere, a line every "
                 "10 s once the command has run 10 s).")


def progress(heartbeat: bool = True) -> Callable[[F], F]:
    """``--progress/--no-progress``, None when neither is given (then: bars when stderr is a terminal,
    :func:`show_progress`). With neither flag and stderr not a terminal (a log, a pipe, a harness),
    the command reports in plain lines (:class:`Ticker`): a line once it has run
    :data:`PROGRESS_AFTER_S` and every :data:`PROGRESS_EVERY_S` after, with its counts where it gives
    them (:func:`counter`), so no long command is silent. ``heartbeat=False``: the command prints such
    lines itself. A command with ``--quiet`` (eval) is silent with it."""
    def deco(f: F) -> F:
        opt = click.option("--progress/--no-progress", default=None, help=PROGRESS_HELP)
        if not heartbeat:
            return opt(f)

        @functools.wraps(f)
        def run(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("progress") is not None or kwargs.get("quiet") or sys.stderr.isatty():
                return f(*args, **kwargs)
            name = " ".join(["opgen", *click.get_current_context().command_path.split()[1:]])
            with Ticker(name):
                return f(*args, **kwargs)
        return cast(F, opt(run))
    return deco


def show_progress(progress: bool | None) -> bool:
    """Whether a command shows its progress: as ``--progress/--no-progress`` says, else when stderr is a terminal."""
    return sys.stderr.isatty() if progress is None else progress


# Plain progress lines (stderr not a terminal, no --progress/--no-progress): the first once a command
# has run this long, then one this often. Module constants, so a test can shorten them.
PROGRESS_AFTER_S = 10.0
PROGRESS_EVERY_S = 10.0


class Ticker:
    """A command's progress in plain lines on stderr, from a thread: ``NAME: DONE/TOTAL UNITs (T s)``,
    or ``NAME: working (T s)`` without counts; the first after :data:`PROGRESS_AFTER_S`, then every
    :data:`PROGRESS_EVERY_S`, and a last one when it ends (if any was printed). The command feeds its
    counts through :func:`counter`; updating is a counter increment, the I/O is the thread's."""

    current: Ticker | None = None  # the one running for this command (set by --progress's wrapper)

    def __init__(self, name: str):
        self.name = name
        self.total: int | None = None
        self.unit = ""
        self.done = 0
        self.said = False
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="opgen-progress", daemon=True)

    def count(self, total: int, unit: str) -> Callable[[int], None]:
        self.total, self.unit, self.done = total, unit, 0
        return self.update

    def update(self, n: int = 1) -> None:
        self.done += n

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        if self.total is None:
            return f"{self.name}: working ({elapsed:.0f} s)"
        units = self.unit if self.total == 1 else self.unit + "s"
        return f"{self.name}: {self.done:,}/{self.total:,} {units} ({elapsed:.0f} s)"

    def _say(self) -> None:
        self.said = True
        text = self.line() + "\n"
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # a captured stream (click's test runner)
            sys.stderr.write(text)
            sys.stderr.flush()
            return
        # straight to the descriptor: this thread takes no lock of sys.stderr's, so a worker forked
        # while it writes (opgen build --workers) never inherits one held
        os.write(fd, text.encode("utf-8", "replace"))

    def _run(self) -> None:
        wait = PROGRESS_AFTER_S
        while not self._stop.wait(wait):
            self._say()
            wait = PROGRESS_EVERY_S

    def __enter__(self) -> Ticker:
        Ticker.current = self
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        Ticker.current = None
        if self.said and exc[0] is None:
            self._say()


def counter(progress: bool | None, desc: str, total: int, unit: str) -> tuple[Callable[[int], None] | None,
                                                                            Callable[[], None]]:
    """``(update, close)`` for a command's counted work: a tqdm bar where :func:`show_progress` says so,
    the running :class:`Ticker`'s counts where the command reports in plain lines, else nothing
    (``update`` None)."""
    if Ticker.current is not None:
        return Ticker.current.count(total, unit), lambda: None
    if not show_progress(progress):
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
    return bar.update, bar.close


def library(help: str = LIBRARY_HELP, prefix: str = "") -> Callable[[F], F]:
    """``--library SPEC`` (the parameter ``library_spec``): a library the user chose (opgen.library.given);
    ``help`` says what it is to this command."""
    return click.option("--library", "library_spec", metavar="SPEC", default=None, help=_prefixed(prefix, help))


def chosen_library(library_spec: str | None) -> OperatorLibrary | None:
    """The library ``--library`` names, loaded (a LibraryError names the file: exit 2); None when not given."""
    # imported when a command runs: opgen.library compiles the study's operators, which --help never needs
    from opgen.library import given

    return given(library_spec) if library_spec else None


def no_plots() -> Callable[[F], F]:
    return click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")


def json_output(help: str = "Print a JSON report.") -> Callable[[F], F]:
    """``--json`` (the parameter ``as_json``); ``help`` says what is printed."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def op_budget(help: str) -> Callable[[F], F]:
    """``--op-budget SECONDS``: how long one operator call may run (opgen.opwatch); ``help`` says what
    running past it is for this command."""
    return click.option("--op-budget", type=click.FloatRange(min=0, min_open=True), default=choices.OP_BUDGET_S,
                        show_default=True, metavar="SECONDS",
                        help=f"Seconds one call of an operator may run. {help}")


def metric_defs() -> Callable[[F], F]:
    """``--drift-call``, ``--pass-k`` and ``--interval`` (opgen.score.metrics.MetricDefs; docs/scoring.md,
    "Metric definitions")."""
    def deco(f: F) -> F:
        f = click.option("--interval", "interval", type=click.Choice(tuple(choices.INTERVALS)), default="rows",
                         show_default=True,
                         help="95% intervals by row (a row's samples are not independent: Wilson at the "
                              "effective sample size of a cluster-robust variance) or per sample. Named in "
                              "summary.json.")(f)
        f = click.option("--pass-k", "pass_k", type=click.Choice(tuple(choices.PASS_K_ESTIMATORS)), default="unbiased",
                         show_default=True,
                         help="pass@k estimator: unbiased (Chen et al.) or earliest (the Interplay release's: one "
                              "of the first k samples correct). Named in summary.json.")(f)
        return click.option("--drift-call", "drift_call", type=click.Choice(choices.DRIFT_CALLS),
                            default="farthest", show_default=True,
                            help="Which call of an operator places its recall block in a distance / tail-call "
                                 "bucket when a row calls it several times.")(f)
    return deco
