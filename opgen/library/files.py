"""Loading an operator library the user chose (issue 25): a ``module:obj`` import spec or a YAML file,
and the canonical library file every build folder and store entry holds.

A library is an :class:`opgen.ops.OperatorLibrary`; the study's 25 are ``opgen.ops.STUDY``. Only a
spec the user gave (``--library``, ``library=``, ``OPGEN_LIBRARY``, a recipe file on the command
line, ``opgen ops add``) reaches :func:`load`: compiling its sources is trusted, as the user's own
code. Nothing that data names (a row, a manifest, a file beside them) is ever loaded here; a
library file found beside data is read as data only (:func:`digest_of_file`).

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
from opgen.library.errors import LibraryError
from opgen.ops import Operator, OperatorLibrary, Param

PARAM_KINDS: tuple[str, ...] = ("int", "choice", "letters")
_OPERATOR_FIELDS = ("id", "name", "gloss", "source", "split", "n_inputs", "params")
_REQUIRED = ("id", "gloss", "source", "split")
_PARAM_FIELDS = ("name", "kind", "lo", "hi", "choices")
_STUDY_NAMES = ("study", "default")
MAX_FILE_BYTES = 16 << 20  # far above any library's sources


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
    name, entries = read_file(path)
    return build(name, entries, where=str(path))


def read_file(path: str | Path) -> tuple[str, list[object]]:
    """(name, operator descriptions) of a library file, read as data: nothing compiled. A file over
    :data:`MAX_FILE_BYTES` is refused unread (a library file beside data may be anyone's)."""
    path = Path(path)
    where = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise LibraryError(f"{where}: over {MAX_FILE_BYTES:,} bytes: not a library file")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LibraryError(f"{where}: cannot read the library: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise LibraryError(f"{where}: not valid YAML: {str(exc)[:200]}") from None
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
    return name, entries


def digest_of_file(path: str | Path) -> str:
    """The content digest of the library a file describes, read as data: its operators are checked
    as :func:`from_yaml` checks them, and none is compiled or run (what verify reads of a build
    folder's library file)."""
    _, entries = read_file(path)
    return ops.content_digest([_described(f) for f in _checked(entries, str(path))])


def canonical_text(lib: OperatorLibrary) -> str:
    """The library as its canonical file: a YAML library file (:func:`from_yaml` reads it back to the
    same digest) that a build folder keeps beside its rows and the store keeps per digest. A
    library whose operators a library file cannot state (more than one parameter, say) is a
    :class:`LibraryError` naming the operator."""
    entries = []
    for op in lib.operators:
        entry: dict[str, Any] = {"id": op.id, "name": op.name, "gloss": op.gloss, "split": op.split,
                                 "n_inputs": op.n_inputs}
        if op.params:
            entry["params"] = [{"name": p.name, "kind": p.kind, "choices": list(p.choices)} if p.kind == "choice"
                               else {"name": p.name, "kind": p.kind, "lo": p.lo, "hi": p.hi} for p in op.params]
        entry["source"] = op.source
        entries.append(entry)
    where = f"library {lib.name!r}"
    head = (f"# opgen operator library {lib.name!r}, digest {lib.digest}.\n"
            "# The canonical file of a build's library: opgen reads it as data and never runs it. To grade or\n"
            "# rebuild with it, vouch for it: opgen ops add THIS_FILE (or give it: --library THIS_FILE).\n")
    text: str = head + yaml.dump({"name": lib.name, "operators": entries}, Dumper=_Dumper, sort_keys=False,
                                 allow_unicode=True, width=1000)
    try:  # the text read back as data, as digest_of_file reads it
        got = ops.content_digest([_described(f) for f in _checked(yaml.safe_load(text)["operators"], where)])
    except LibraryError as exc:
        raise LibraryError(f"{exc} (it cannot be written as a library file)") from None
    if got != lib.digest:
        raise LibraryError(f"{where}: its operators cannot be written as a library file with the same digest "
                           f"(a parameter a file cannot state: {lib.digest[:12]} becomes {got[:12]})")
    return text


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # yaml ships no types
    """Multi-line strings (sources) as literal blocks, where YAML can hold them so."""


def _str(dumper: Any, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _checked(entries: Sequence[object], where: str) -> list[dict[str, Any]]:
    checked = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        fields = _check_entry(entry, i, where)
        if fields["id"] in seen:
            raise LibraryError(f"{where}: operator {i} ({fields['id']}): field 'id': duplicate of operator "
                               f"{seen[fields['id']]}")
        seen[fields["id"]] = i
        checked.append(fields)
    return checked


def _described(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Checked fields as :func:`opgen.ops.describe_operator` describes the operator they make."""
    return {"id": fields["id"], "name": fields["name"], "source": fields["source"], "n_inputs": fields["n_inputs"],
            "params": [{"name": p.name, "kind": p.kind, "lo": p.lo, "hi": p.hi, "choices": list(p.choices)}
                       for p in fields["params"]],
            "split": fields["split"], "gloss": fields["gloss"]}


def build(name: str, entries: Sequence[object], where: str = "<library>") -> OperatorLibrary:
    """A library from plain operator descriptions (the YAML fields), compiled into one namespace."""
    return OperatorLibrary(name, compile_operators(entries, where=where, namespace_name=f"opgen.library.{name}"))


def compile_operators(entries: Sequence[object], where: str = "<library>",
                      namespace_name: str = "opgen.library") -> tuple[Operator, ...]:
    """Operators from descriptions, their sources compiled into one namespace (as ``opgen/ops.py``
    compiles the study's). ``where`` names the origin in every error."""
    checked = _checked(entries, where)
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
