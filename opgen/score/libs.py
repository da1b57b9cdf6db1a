"""The operator library a grade is made against (issue 25): the study's 25 or a user's library.

Grading reads every operator fact (sources, arities, split, costs) from the library, never from the
global ``opgen.ops``. The library travels to grading processes as plain values (:func:`to_wire`:
its name, the spec it was loaded from and every operator's source, params and split) and is
rebuilt there by :func:`from_wire` with :func:`opgen.library.compile_operators` — the user's own
trusted code, compiled in grading processes only. A ``module:obj`` spec is imported there instead
when it loads a library of the same digest (its ``cost`` bounds then reach the static path).

Libraries are known by their content digest (:attr:`opgen.ops.OperatorLibrary.digest`):
:func:`register` keeps one library per digest in a process, the first one registered.

A ground truth names its library as ``"library": {"name", "digest", "spec"}``; one without the key
is the study's (:func:`opgen.score.judge.truth_library`).
"""

from __future__ import annotations

import threading
from typing import Any

from opgen import ops
from opgen.errors import USAGE, OpgenError
from opgen.ops import OperatorLibrary

STUDY: OperatorLibrary = ops.STUDY
STUDY_DIGEST: str = STUDY.digest

_BY_DIGEST: dict[str, OperatorLibrary] = {STUDY_DIGEST: STUDY}
_SPECS: dict[str, str] = {STUDY_DIGEST: "study"}
_LOCK = threading.Lock()


class LibraryMismatch(ValueError, OpgenError):
    """A row whose ground truth names another library than the one grading was given."""

    exit_code = USAGE


def register(library: OperatorLibrary, spec: str = "") -> str:
    """Make ``library`` known by its digest (the first one of a digest stays); returns the digest."""
    digest = library.digest
    with _LOCK:
        _BY_DIGEST.setdefault(digest, library)
        if spec:
            _SPECS.setdefault(digest, spec)
    return digest


def get(digest: str) -> OperatorLibrary:
    """The registered library of ``digest`` (the study's for "")."""
    return _BY_DIGEST[digest or STUDY_DIGEST]


def spec_of(library: OperatorLibrary) -> str:
    """The spec a library was registered with ("" when none)."""
    return _SPECS.get(library.digest, "")


def resolve(library: object, spec: str = "") -> OperatorLibrary | None:
    """The library an entry point was given: None (the study), an :class:`OperatorLibrary`, or a
    spec that :func:`opgen.library.load` takes. The study's library is None (its grades and wire
    form are the study's, unchanged)."""
    if library is None or library == "":
        return None
    if isinstance(library, str):
        lib = load_spec(library)
    elif isinstance(library, OperatorLibrary):
        lib = library
        register(lib, spec)
    else:
        raise TypeError(f"library must be an opgen.ops.OperatorLibrary or a spec string, got {type(library).__name__}")
    return None if lib.digest == STUDY_DIGEST else lib


_LOADED: dict[str, OperatorLibrary] = {}


def load_spec(spec: str) -> OperatorLibrary:
    """:func:`opgen.library.load` once per spec in a process (registered under its digest)."""
    with _LOCK:
        known = _LOADED.get(spec)
    if known is not None:
        return known
    from opgen import library as L

    lib = L.load(spec)
    register(lib, spec)
    with _LOCK:
        _LOADED[spec] = lib
    return lib


def to_wire(library: OperatorLibrary) -> dict[str, Any]:
    """The library as plain values (what a grading process receives): name, digest, spec and each
    operator's id, name, gloss, source, split, n_inputs and params."""
    return {"name": library.name, "digest": library.digest, "spec": spec_of(library),
            "operators": [{"id": op.id, "name": op.name, "gloss": op.gloss, "source": op.source, "split": op.split,
                           "n_inputs": op.n_inputs, "params": [_param(p) for p in op.params]}
                          for op in library.operators]}


def _param(p: ops.Param) -> dict[str, Any]:
    if p.kind == "choice":
        return {"name": p.name, "kind": p.kind, "choices": list(p.choices)}
    return {"name": p.name, "kind": p.kind, "lo": p.lo, "hi": p.hi}


def from_wire(wire: object) -> OperatorLibrary:
    """The library of :func:`to_wire`'s dict, built once per digest in a process: a ``module:obj``
    spec imported when it loads the same digest (its cost bounds included), else compiled from the
    sources. A library whose sources do not give the digest sent raises ``LibraryError``."""
    from opgen import library as L

    if not isinstance(wire, dict) or not isinstance(wire.get("digest"), str):
        raise L.LibraryError(f"a library on the wire is a dict with a digest, got {type(wire).__name__}")
    digest = wire["digest"]
    with _LOCK:
        known = _BY_DIGEST.get(digest)
    if known is not None:
        return known
    spec = str(wire.get("spec") or "")
    if spec and ":" in spec and not spec.endswith((".yaml", ".yml")):
        try:
            lib = L.load(spec)
        except L.LibraryError:
            lib = None
        if lib is not None and lib.digest == digest:
            register(lib, spec)
            return lib
    name = str(wire.get("name") or "library")
    lib = L.build(name, wire.get("operators") or [], where=f"library {name!r}")
    if lib.digest != digest:
        raise L.LibraryError(f"library {lib.name!r}: its sources give digest {lib.digest[:12]}, not the "
                             f"{digest[:12]} sent")
    register(lib, spec)
    return lib


def mismatch(truth_digest: str, library: OperatorLibrary | None) -> str:
    """"" when a row of library ``truth_digest`` ("" = the study) may be graded against
    ``library`` (None = the study), else the detail of the ``library_mismatch`` grade."""
    want = library.digest if library is not None else STUDY_DIGEST
    got = truth_digest or STUDY_DIGEST
    if got == want:
        return ""
    have = library.name if library is not None else "study"
    return (f"the row's ground truth names library digest {got[:12]}, graded against library {have!r} "
            f"(digest {want[:12]}); give the row's library (--library SPEC)")
