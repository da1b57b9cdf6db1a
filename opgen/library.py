"""Operator libraries from outside the package (issue 25): a ``module:obj`` import spec or a YAML file.

A library is an :class:`opgen.ops.OperatorLibrary`; the study's 25 are ``opgen.ops.STUDY``. A user's
library is the user's own file, so compiling its sources here is trusted (it is not model text).

A YAML library::

    name: my-ops                    # optional: the file's stem
    operators:
      - id: rev                     # a Python identifier; the source defines a function of that name
        name: reverse               # optional: the id
        gloss: reverse the string
        split: train                # train or heldout
        n_inputs: 1                 # optional: 1 (unary) or 2 (two string inputs)
        params:                     # optional: the Param fields
          - {name: n, kind: int, lo: 1, hi: 3}
        source: |
          def rev(s):
              return s[::-1]

Sources are compiled into one namespace, as ``opgen/ops.py`` compiles the study's, so recursive
operators recurse through their own id. A YAML operator has no growth bound (``out_len``) and no
static cost bound (``cost``): those are Python callables. Such operators are graded by the sandbox
only, never by the static path (which declines an operator without a cost bound); a library that
needs them is a Python module building :class:`~opgen.ops.Operator` objects itself, e.g. with
:func:`compile_operators` and :func:`dataclasses.replace`.
"""

from __future__ import annotations

import importlib
import inspect
import keyword
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from opgen import ops
from opgen.errors import USAGE, OpgenError
from opgen.ops import Operator, OperatorLibrary, Param

PARAM_KINDS: tuple[str, ...] = ("int", "choice", "letters")
_OPERATOR_FIELDS = ("id", "name", "gloss", "source", "split", "n_inputs", "params")
_REQUIRED = ("id", "gloss", "source", "split")
_PARAM_FIELDS = ("name", "kind", "lo", "hi", "choices")
_STUDY_NAMES = ("study", "default")


class LibraryError(ValueError, OpgenError):
    """A library that cannot be loaded; the message names the file (or spec), operator and field."""

    exit_code = USAGE


def load(spec: str) -> OperatorLibrary:
    """The library ``spec`` names: ``study`` (or ``default``), a YAML file path, or ``module:obj``."""
    if spec in _STUDY_NAMES:
        return ops.STUDY
    path = Path(spec)
    if spec.endswith((".yaml", ".yml")) or path.is_file():
        return from_yaml(path)
    if ":" in spec:
        return from_import(spec)
    raise LibraryError(f"library {spec!r}: not a YAML file (.yaml/.yml), a module:obj import spec, or 'study'")


def from_import(spec: str) -> OperatorLibrary:
    """The :class:`OperatorLibrary` object named by ``module:obj`` (``obj`` may be dotted)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise LibraryError(f"library {spec!r}: an import spec is module:obj")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's module failing to import is their error, named
        raise LibraryError(f"library {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise LibraryError(f"library {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(value, OperatorLibrary):
        raise LibraryError(f"library {spec!r}: {attr} is a {type(value).__name__}, not an opgen.ops.OperatorLibrary")
    return value


def from_yaml(path: str | Path) -> OperatorLibrary:
    """The library a YAML file describes (module docstring); errors name the file, operator and field."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LibraryError(f"{where}: cannot read the library: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LibraryError(f"{where}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise LibraryError(f"{where}: a library file is a mapping with an 'operators' list")
    unknown = sorted(set(map(str, data)) - {"name", "operators"})
    if unknown:
        raise LibraryError(f"{where}: unknown field(s) {', '.join(unknown)} (a library has name, operators)")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise LibraryError(f"{where}: field 'name': a non-empty string")
    entries = data.get("operators")
    if not isinstance(entries, list) or not entries:
        raise LibraryError(f"{where}: field 'operators': a non-empty list of operators")
    return build(name, entries, where=where)


def build(name: str, entries: Sequence[Mapping[str, Any]], where: str = "<library>") -> OperatorLibrary:
    """A library from plain operator descriptions (the YAML fields), compiled into one namespace."""
    return OperatorLibrary(name, compile_operators(entries, where=where, namespace_name=f"opgen.library.{name}"))


def compile_operators(entries: Sequence[Mapping[str, Any]], where: str = "<library>",
                      namespace_name: str = "opgen.library") -> tuple[Operator, ...]:
    """Operators from descriptions, their sources compiled into one namespace (as ``opgen/ops.py``
    compiles the study's). ``where`` names the origin in every error."""
    checked = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        fields = _check_entry(entry, i, where)
        if fields["id"] in seen:
            raise LibraryError(f"{where}: operator {i} ({fields['id']}): field 'id': duplicate of operator "
                               f"{seen[fields['id']]}")
        seen[fields["id"]] = i
        checked.append(fields)
    namespace: dict[str, object] = {"__name__": namespace_name}
    for i, fields in enumerate(checked):
        label = f"{where}: operator {i} ({fields['id']}): field 'source'"
        try:
            code = compile(fields["source"], f"<opgen {fields['id']}>", "exec")
        except (SyntaxError, ValueError) as exc:
            raise LibraryError(f"{label}: does not compile: {exc}") from None
        try:
            exec(code, namespace)
        except Exception as exc:  # the module-level code of the user's source failing
            raise LibraryError(f"{label}: running it failed: {type(exc).__name__}: {exc}") from None
    out = []
    for i, fields in enumerate(checked):
        label = f"{where}: operator {i} ({fields['id']}): field 'source'"
        fn = namespace.get(fields["id"])
        if not inspect.isfunction(fn):
            raise LibraryError(f"{label}: does not define a function named {fields['id']!r}")
        arity = fields["n_inputs"] + len(fields["params"])
        try:
            inspect.signature(fn).bind(*range(arity))
        except TypeError:
            raise LibraryError(f"{label}: {fields['id']}{inspect.signature(fn)} does not take {arity} argument(s) "
                               f"({fields['n_inputs']} string input(s) and {len(fields['params'])} param(s))") from None
        out.append(Operator(fields["id"], fields["name"], fields["gloss"], fields["source"], fields["n_inputs"],
                            fields["params"], fields["split"], fn))
    return tuple(out)


def _check_entry(entry: object, i: int, where: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise LibraryError(f"{where}: operator {i}: a mapping with fields {', '.join(_OPERATOR_FIELDS)}")
    op_id = entry.get("id")
    label = f"{where}: operator {i}" + (f" ({op_id})" if isinstance(op_id, str) else "")
    unknown = sorted(set(map(str, entry)) - set(_OPERATOR_FIELDS))
    if unknown:
        raise LibraryError(f"{label}: unknown field(s) {', '.join(unknown)} (an operator has "
                           f"{', '.join(_OPERATOR_FIELDS)}; out_len and cost bounds need a Python library)")
    for key in _REQUIRED:
        if key not in entry:
            raise LibraryError(f"{label}: field {key!r} is missing")
    if not isinstance(op_id, str) or not op_id.isidentifier() or keyword.iskeyword(op_id):
        raise LibraryError(f"{label}: field 'id': {op_id!r} is not a Python identifier")
    for key in ("name", "gloss", "source"):
        value = entry.get(key, op_id)
        if not isinstance(value, str) or not value.strip():
            raise LibraryError(f"{label}: field {key!r}: a non-empty string")
    if entry["split"] not in ops.SPLITS:
        raise LibraryError(f"{label}: field 'split': {entry['split']!r} is not {' or '.join(ops.SPLITS)}")
    n_inputs = entry.get("n_inputs", 1)
    if n_inputs not in (1, 2) or isinstance(n_inputs, bool):
        raise LibraryError(f"{label}: field 'n_inputs': {n_inputs!r} is not 1 or 2")
    params = entry.get("params", [])
    if not isinstance(params, list):
        raise LibraryError(f"{label}: field 'params': a list of parameters")
    if n_inputs == 2 and params:
        raise LibraryError(f"{label}: field 'params': an operator with two string inputs takes no parameters")
    if len(params) > 1:
        raise LibraryError(f"{label}: field 'params': at most one parameter (the signature kinds are "
                           f"{', '.join(ops.KINDS)})")
    source = entry["source"]
    return {"id": op_id, "name": entry.get("name", op_id), "gloss": entry["gloss"],
            "source": source if source.endswith("\n") else source + "\n", "split": entry["split"],
            "n_inputs": n_inputs, "params": tuple(_param(p, j, label) for j, p in enumerate(params))}


def _param(p: object, j: int, label: str) -> Param:
    at = f"{label}: field 'params[{j}]'"
    if not isinstance(p, Mapping):
        raise LibraryError(f"{at}: a mapping with fields {', '.join(_PARAM_FIELDS)}")
    unknown = sorted(set(map(str, p)) - set(_PARAM_FIELDS))
    if unknown:
        raise LibraryError(f"{at}: unknown field(s) {', '.join(unknown)} (a parameter has {', '.join(_PARAM_FIELDS)})")
    name, kind = p.get("name"), p.get("kind")
    if not isinstance(name, str) or not name.isidentifier():
        raise LibraryError(f"{at}.name: {name!r} is not a Python identifier")
    if kind not in PARAM_KINDS:
        raise LibraryError(f"{at}.kind: unknown parameter kind {kind!r} (known: {', '.join(PARAM_KINDS)})")
    if kind == "choice":
        choices = p.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
            raise LibraryError(f"{at}.choices: a non-empty list of strings")
        return Param(name, "choice", choices=tuple(choices))
    lo, hi = p.get("lo"), p.get("hi")
    for key, value in (("lo", lo), ("hi", hi)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise LibraryError(f"{at}.{key}: an integer")
    assert isinstance(lo, int) and isinstance(hi, int)
    if lo > hi:
        raise LibraryError(f"{at}.lo: {lo} is above hi ({hi})")
    if kind == "letters" and lo < 0:
        raise LibraryError(f"{at}.lo: a letter count is at least 0")
    return Param(name, kind, lo, hi)
