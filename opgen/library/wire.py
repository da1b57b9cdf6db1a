"""A library on the wire to a grading process: plain values the trusted parent sends, rebuilt there.

Grading reads every operator fact (sources, arities, split, costs) from the library, never from the
global ``opgen.ops``. A grading process receives the library the parent resolved
(``GradeSettings.to_wire()["library"]``: its name, digest and every operator's source, params and
split, plus the ``module:obj`` spec the user loaded it from, if any) and rebuilds it with
:func:`opgen.library.build`: the user's own code, compiled in grading processes only. A spec the
user gave is imported there instead when it loads a library of the same digest (its ``cost``
bounds then reach the static path); this is the parent's own choice travelling on the parent's own
pipe, never a spec read from data.

One library per digest per process: the first one rebuilt.
"""

from __future__ import annotations

import threading
from typing import Any

from opgen.library import files
from opgen.library.errors import LibraryError
from opgen.ops import OperatorLibrary, Param

_REBUILT: dict[str, OperatorLibrary] = {}
_SPECS: dict[str, str] = {}  # digest -> the module:obj spec the user loaded it from, in this process
_LOCK = threading.Lock()


def remember_spec(lib: OperatorLibrary, spec: str) -> None:
    """Note that the user loaded ``lib`` from the import spec ``spec`` (sent on with it)."""
    if ":" in spec and not spec.endswith((".yaml", ".yml")):
        with _LOCK:
            _SPECS.setdefault(lib.digest, spec)


def to_wire(library: OperatorLibrary) -> dict[str, Any]:
    """The library as plain values (what a grading process receives): name, digest, the user's
    import spec ("" for none) and each operator's id, name, gloss, source, split, n_inputs and params."""
    return {"name": library.name, "digest": library.digest, "spec": _SPECS.get(library.digest, ""),
            "operators": [{"id": op.id, "name": op.name, "gloss": op.gloss, "source": op.source, "split": op.split,
                           "n_inputs": op.n_inputs, "params": [_param(p) for p in op.params]}
                          for op in library.operators]}


def _param(p: Param) -> dict[str, Any]:
    if p.kind == "choice":
        return {"name": p.name, "kind": p.kind, "choices": list(p.choices)}
    return {"name": p.name, "kind": p.kind, "lo": p.lo, "hi": p.hi}


def from_wire(wire: object) -> OperatorLibrary:
    """The library of :func:`to_wire`'s dict, built once per digest in a process: the user's import
    spec imported when it loads the same digest (its cost bounds included), else compiled from the
    sources. A library whose sources do not give the digest sent raises :class:`LibraryError`."""
    if not isinstance(wire, dict) or not isinstance(wire.get("digest"), str):
        raise LibraryError(f"a library on the wire is a dict with a digest, got {type(wire).__name__}")
    digest: str = wire["digest"]
    with _LOCK:
        known = _REBUILT.get(digest)
    if known is not None:
        return known
    lib = _imported(str(wire.get("spec") or ""), digest)
    if lib is None:
        name = str(wire.get("name") or "library")
        operators = wire.get("operators")
        lib = files.build(name, operators if isinstance(operators, list) else [], where=f"library {name!r}")
        if lib.digest != digest:
            raise LibraryError(f"library {lib.name!r}: its sources give digest {lib.digest[:12]}, not the "
                               f"{digest[:12]} sent")
    with _LOCK:
        return _REBUILT.setdefault(digest, lib)


def _imported(spec: str, digest: str) -> OperatorLibrary | None:
    if not spec or ":" not in spec or spec.endswith((".yaml", ".yml")):
        return None
    try:
        lib = files.from_import(spec)
    except LibraryError:  # not importable here (a sealed grading process): compiled from the sources
        return None
    if lib.digest != digest:
        return None
    remember_spec(lib, spec)
    return lib
