"""Fault injection for tests: one environment variable, one parser, a registry of named points.

``OPGEN_FAULT=<point>:<value>[,<point>:<value>...]`` arms each named point; the code at a point asks
:func:`value` (or :func:`signal_at`) whether it is armed. Every point is one :class:`Point` in
:data:`POINTS`: its name, what it does, and the parser of its value (a signal name, a count); a
``numbered`` point is armed every time as ``<point>`` or only its N-th time as ``<point>-N`` (the
code names both: ``signal_at("p")`` and ``signal_at(f"p-{n}")``). A new
point is one ``register`` line here and one call where it fires; a name that is not registered, or a
value its parser refuses, is a :class:`FaultSpecError` (exit 2) naming the variable, so a test's typo
fails instead of silently testing nothing. Never meant for anything but tests (docs/recipes.md).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opgen.errors import USAGE, OpgenError

ENV = "OPGEN_FAULT"


class FaultSpecError(ValueError, OpgenError):
    """``OPGEN_FAULT`` names a point that is not registered, or gives a value its point cannot take."""

    exit_code = USAGE


def signal_value(text: str) -> int:
    """``KILL``, ``TERM``, ``INT``, ``STOP`` ... (``SIG`` optional): the signal's number."""
    name = text.upper()
    sig = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if not isinstance(sig, signal.Signals):
        raise ValueError(f"{text!r} is not a signal name (KILL, TERM, INT, STOP, ...)")
    return int(sig)


def count_value(text: str) -> int:
    """A count of things done before the fault fires (0 or more)."""
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a count (0, 1, 2, ...)")
    return int(text)


@dataclass(frozen=True)
class Point:
    name: str
    does: str
    parse: Callable[[str], Any]
    default: str | None = None  # the value of ``<point>`` written without ``:<value>``
    numbered: bool = False  # ``<point>-N`` arms only its N-th time (the code counts)


POINTS: dict[str, Point] = {}


def register(name: str, does: str, parse: Callable[[str], Any], default: str | None = None,
             numbered: bool = False) -> Point:
    if name in POINTS:
        raise ValueError(f"fault point {name!r} is registered twice")
    point = POINTS[name] = Point(name, does, parse, default, numbered)
    return point


def point_of(name: str) -> Point | None:
    """The registered point ``name`` names: itself, or ``<point>-N`` of a numbered one."""
    if name in POINTS:
        return POINTS[name]
    base, _, n = name.rpartition("-")
    point = POINTS.get(base)
    return point if point is not None and point.numbered and n.isdigit() else None


# signals sent at a point: to the process at that point unless said otherwise
register("produced", "build: the build's main process, after a worker produced a shard", signal_value, "KILL")
register("shard-worker", "build: a shard's worker process, at the start of the first shard task only "
         "(local pool or Ray; a retry then succeeds)", signal_value, "KILL")
register("shard-worker-always", "build: a shard's worker process, at the start of every shard task",
         signal_value, "KILL")
register("staged", "score, eval, fit, push --dry-run: a report staged, before its swap", signal_value, "KILL")
register("batch-written", "eval: one batch's generations on disk", signal_value, "KILL")
register("before-swap", "every command that writes: before the final swap", signal_value, "KILL")
register("between-renames", "the two-rename swap: the old output moved aside, the new not yet in place",
         signal_value, "KILL")
register("after-swap", "every command that writes: after the final swap", signal_value, "KILL")
register("grading-sent", "score: a grading process, as it is given a chunk (every one, or the N-th of the pool)",
         signal_value, "KILL", numbered=True)
register("sandbox-sent", "score: a sandbox worker, as it is given a request (every one, or the N-th of the sandbox)",
         signal_value, "KILL", numbered=True)
register("scored-row", "score: the scorer, once row N's records are written (a run stopped mid-stream)",
         signal_value, "KILL", numbered=True)
# counts: the driver of an eval sweep (opgen.distributed.driver)
register("kill-replica-after", "eval sweep: the replica that produced the N-th chunk written is killed "
         "right after it is written (0: every replica, before the first chunk)", count_value)
register("abort-after", "eval sweep: the driver stops after N chunks written (a lost node)", count_value)
register("lose-chunk", "eval sweep: whichever replica is given the N-th chunk of the queue (1, 2, ...) is killed "
         "as it is (a chunk that kills its replica)", count_value)


_PARSED: dict[str, dict[str, Any]] = {}  # the variable's text -> its points' values, parsed once


def armed(spec: str | None = None) -> dict[str, Any]:
    """Every point ``spec`` (default: ``$OPGEN_FAULT``) arms, with its parsed value."""
    text = os.environ.get(ENV, "") if spec is None else spec
    if text in _PARSED:
        return _PARSED[text]
    got: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = part.partition(":")
        point = point_of(name)
        if point is None:
            raise FaultSpecError(f"{ENV}={text!r}: no fault point {name!r} (points: {', '.join(sorted(POINTS))})")
        raw = raw if sep else (point.default or "")
        try:
            got[name] = point.parse(raw)
        except ValueError as exc:
            raise FaultSpecError(f"{ENV}={text!r}: {name}: {exc}") from None
    _PARSED[text] = got
    return got


def value(point: str) -> Any:
    """The value ``$OPGEN_FAULT`` gives ``point``, or None when it does not arm it."""
    assert point_of(point) is not None, f"fault point {point!r} is not registered"
    return armed().get(point)


def signal_nth(point: str, n: int, pid: int | None = None) -> None:
    """At the ``n``-th time through a numbered point: send its signal when ``$OPGEN_FAULT`` arms it every
    time (``point``) or this time (``point-n``); the variable is read once for both."""
    assert POINTS[point].numbered, f"fault point {point!r} is not numbered"
    got = armed()
    for name in (point, f"{point}-{n}"):
        if name in got:
            os.kill(pid if pid is not None else os.getpid(), got[name])


def signal_at(point: str, pid: int | None = None) -> None:
    """Send the point's signal to ``pid`` (default: this process) when ``$OPGEN_FAULT`` arms it."""
    sig = value(point)
    if sig is not None:
        os.kill(pid if pid is not None else os.getpid(), sig)
