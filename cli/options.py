"""Options several commands share, declared once: name, type, default and help live here.

Each is a decorator factory (``@options.namespace()``). Where a command's context changes what an
option means, the help says so through a parameter, not a second declaration: ``prefix`` names the
part of a command an option belongs to (``opgen eval``'s scorer options read "Scorer: ..."), and
``help`` replaces the text of the few options whose effect is the command's own (``--executor``,
``--json``, ``opgen validate --allow-weak-sandbox``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from opgen import choices

F = TypeVar("F", bound=Callable[..., Any])

NAMESPACE_HELP = ("strict runs programs on their own; native with what the native benchmark's module had "
                  "imported (gcd from math; see docs/scoring.md).")
NO_STATIC_HELP = ("Run every program in the sandbox (by default programs of library code only are evaluated "
                  "without running them, with the same grades; docs/scoring.md).")
ALLOW_WEAK_SANDBOX_HELP = "Grade even where the sandbox's isolation is below 'full' (it says what is then unprotected)."
RAY_ADDRESS_HELP = "ray: an existing cluster (e.g. auto, or ray://HOST:10001); default: start a local one on 127.0.0.1."
RAY_NUM_CPUS_HELP = "ray: CPUs of the local cluster started without --ray-address (default: this machine's)."


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


def progress() -> Callable[[F], F]:
    """``--progress/--no-progress``, None when neither is given (then: bars when stderr is a terminal,
    :func:`show_progress`)."""
    return click.option("--progress/--no-progress", default=None,
                        help="Progress bars on stderr (default: when a terminal).")


def show_progress(progress: bool | None) -> bool:
    """Whether a command shows its progress: as ``--progress/--no-progress`` says, else when stderr is a terminal."""
    return sys.stderr.isatty() if progress is None else progress


def no_plots() -> Callable[[F], F]:
    return click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")


def json_output(help: str = "Print a JSON report.") -> Callable[[F], F]:
    """``--json`` (the parameter ``as_json``); ``help`` says what is printed."""
    return click.option("--json", "as_json", is_flag=True, help=help)


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
