"""A row's ground truth read as data, totally: the JSON object, its nesting bounded, its fields typed.

Ground truths come with datasets, and a dataset is anyone's (docs/security.md): every reader of one
(the scorer and its entry points, validate, stats, leakage, split-stats, gold answers) parses it
here, so a value nested 100,000 deep or a field of the wrong type is one :class:`GroundTruthError`
(a ``ValueError``) naming the field, never a ``RecursionError`` or a ``TypeError``. The contract:
docs/contracts.md, "ground_truth"; ``schemas/ground_truth.schema.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from opgen.errors import OpgenError

# Far deeper than any ground truth (opgen's nest four levels; a native ref_output a few more) and far
# shallower than the interpreter's recursion limit, which json, copies and comparisons all hit.
MAX_DEPTH = 100
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


class GroundTruthError(ValueError, OpgenError):
    """A ground truth that is not the contract's JSON (names the missing or malformed field)."""

    exit_code = 1


def too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (JSON-like: dicts and lists) nests deeper than ``limit``; no recursion."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth > limit:
                return True
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return False


def text_too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests deeper than ``limit``, read without a parser (linear; strings skipped)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            return True
    return False


def read(raw: object, where: str = "ground_truth") -> dict[str, Any]:
    """The ground truth as a JSON object: ``raw`` is its JSON text (or bytes) or the object itself.
    Text nested deeper than :data:`MAX_DEPTH` is refused before it is parsed."""
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroundTruthError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if isinstance(raw, str):
        if text_too_deep(raw):
            raise GroundTruthError(f"{where} nests deeper than {MAX_DEPTH} levels")
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise GroundTruthError(f"{where} is not JSON: {str(exc)[:120]}") from None
    else:
        if too_deep(raw):
            raise GroundTruthError(f"{where} nests deeper than {MAX_DEPTH} levels")
        # an object (a dataframe's row may hold numpy arrays): read as its JSON text is read
        try:
            text = json.dumps(raw, default=_plain)
        except (TypeError, ValueError, RecursionError) as exc:
            raise GroundTruthError(f"{where} is not a JSON value: {str(exc)[:120]}") from None
        return read(text, where)
    if not isinstance(value, dict):
        raise GroundTruthError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _plain(value: object) -> object:
    tolist = getattr(value, "tolist", None)  # numpy values, from a dataframe's row
    if tolist is None:
        raise TypeError(f"it holds a {type(value).__name__}")
    return tolist()


_TEXT_FIELDS = ("entry", "expr", "input", "output")


def check(gt: Mapping[str, Any], where: str = "ground_truth") -> None:
    """That ``gt`` (from :func:`read`) has the contract's shape and types; :class:`GroundTruthError`
    naming the first field that does not. Only what the scorer reads is checked: opgen's ``tasks``
    (``entry``, ``expr``, ``input``, ``output`` strings; ``ops`` a list of strings and ``depth`` an
    integer where present) and ``mode``; a native row's ``ref_output`` is any JSON value. The
    ``library`` member is :func:`opgen.library.ref_of_truth`'s to read."""
    if "tasks" not in gt:
        if "ref_output" not in gt:
            raise GroundTruthError(f"{where} has neither 'tasks' nor the native 'ref_output'")
        return
    tasks = gt["tasks"]
    if not isinstance(tasks, list):
        raise GroundTruthError(f"{where}.tasks must be a non-empty list of tasks, got {type(tasks).__name__}")
    if not tasks:
        raise GroundTruthError(f"{where}.tasks is empty")
    for i, t in enumerate(tasks):
        at = f"{where}.tasks[{i}]"
        if not isinstance(t, dict):
            raise GroundTruthError(f"{at} must be an object, got {type(t).__name__}")
        for key in _TEXT_FIELDS:
            if key not in t:
                raise GroundTruthError(f"{at} lacks {key!r}")
            if not isinstance(t[key], str):
                raise GroundTruthError(f"{at}.{key} must be a string, got {type(t[key]).__name__}")
        ops = t.get("ops", [])
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise GroundTruthError(f"{at}.ops must be a list of operator ids (strings)")
        depth = t.get("depth", -1)
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise GroundTruthError(f"{at}.depth must be an integer, got {type(depth).__name__}")
    mode = gt.get("mode", "program")
    if mode not in ("program", "forward"):
        raise GroundTruthError(f"{where}.mode must be 'program' or 'forward', got {str(mode)[:40]!r}")


def parse(raw: object, where: str = "ground_truth") -> dict[str, Any]:
    """:func:`read` then :func:`check`: a ground truth the scorer can read."""
    gt = read(raw, where)
    check(gt, where)
    return gt
