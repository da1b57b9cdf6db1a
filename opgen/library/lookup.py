"""The one lookup: which operator library the user chose, and which one a row, ground truth or
manifest means (issue 31).

A library loads only from what the user chose (:func:`given`: ``--library``, ``library=``,
``OPGEN_LIBRARY``; a recipe file the user passed, opgen.recipe) or registered
(:mod:`opgen.library.store`). Data names a library by :class:`~opgen.library.identity.Ref` alone,
and :func:`library_of` answers which library that is:

- a library was given: it, when its digest is the one named (the study's for data naming none);
  else :class:`LibraryMismatch`;
- none was given: the study's for data naming none (or the study's digest), else the store's entry
  of that digest; else :class:`UnknownLibrary`, which says how to provide it. Never a load of
  anything the data names, and never a grade of 0 for the want of a library.

Every command and entry point that reads rows (``compute_score*`` and the adapters, ``opgen
serve``, ``score``, ``validate``, ``stats``, ``leakage``, ``verify``, ``push``, ``export``,
``split-stats``, the notebook API) asks here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from opgen import truth
from opgen.library import files, store, wire
from opgen.library.errors import LibraryError, LibraryMismatch, UnknownLibrary
from opgen.library.identity import Ref, RefError, parse_ref
from opgen.ops import STUDY, OperatorLibrary
from opgen.outdir import LIBRARY_FILE

ENV = "OPGEN_LIBRARY"
_GIVEN: dict[str, OperatorLibrary] = {}
_LOCK = threading.Lock()


def given(value: OperatorLibrary | str | None, *, env: bool = False) -> OperatorLibrary | None:
    """The library the user chose: ``value`` itself, or the library its spec loads (a YAML file or
    ``module:obj``: the user's own, loaded once per spec per process); None when none was chosen
    (then, with ``env``, the one ``OPGEN_LIBRARY`` names, if set)."""
    if isinstance(value, OperatorLibrary):
        return value
    if value is None or value == "":
        spec = os.environ.get(ENV, "").strip() if env else ""
        return given(spec) if spec else None
    if not isinstance(value, str):
        raise LibraryError(f"library: an opgen OperatorLibrary or a spec (a YAML file, module:obj or 'study'), "
                           f"got {type(value).__name__}")
    key = os.path.abspath(value) if value.endswith((".yaml", ".yml")) or os.path.isfile(value) else value
    with _LOCK:
        known = _GIVEN.get(key)
    if known is not None:
        return known
    lib = files.load(value)
    wire.remember_spec(lib, value)
    with _LOCK:
        return _GIVEN.setdefault(key, lib)


def library_of(ref: Ref | None, chosen: OperatorLibrary | None, where: str = "") -> OperatorLibrary:
    """The library that data naming ``ref`` (None: the study's, which rows name by naming none) is
    of, given the user's ``chosen`` one (None: none given). ``where`` prefixes the errors (a file,
    a row)."""
    want = ref if ref is not None else Ref(STUDY.name, STUDY.digest)
    if chosen is not None:
        if chosen.digest == want.digest:
            return chosen
        raise LibraryMismatch(f"{where}the rows name operator library {want}, but the library given is "
                              f"{chosen.name!r} (digest {chosen.digest[:12]}); give the rows' library, or give "
                              "none to find it in your library store by its digest")
    if want.digest == STUDY.digest:
        return STUDY
    found = store.get(want.digest)
    if found is None:
        raise UnknownLibrary(
            f"{where}the rows name operator library {want}, which is neither given nor in your library store "
            f"({store.root()}); opgen loads no library that data names. If you trust it, register it once: "
            f"opgen ops add FILE (a build folder holds its library as {LIBRARY_FILE}), or give it: "
            f"--library FILE (library=, {ENV} in code)")
    return found


def library_of_rows(paths: Sequence[Path], chosen: OperatorLibrary | None = None) -> OperatorLibrary:
    """:func:`library_of` the library the rows of ``paths`` (parquet files) name (:func:`ref_of_rows`):
    what a command reading files asks. A first row too deep to read is a GroundTruthError."""
    return library_of(ref_of_rows(paths), chosen, f"{paths[0]}: " if len(paths) == 1 else "")


def ref_of_truth(gt: Mapping[str, object], where: str = "ground_truth") -> Ref | None:
    """The library a ground truth (a JSON object, :func:`opgen.truth.read`) names; None when it
    names none. A malformed ``library`` member is a :class:`opgen.truth.GroundTruthError`."""
    if "library" not in gt or gt["library"] is None:
        return None
    try:
        return parse_ref(gt["library"], f"{where}.library")
    except RefError as exc:
        raise truth.GroundTruthError(str(exc)) from None


def ref_of_manifest(manifest: Mapping[str, object], where: str = "manifest.json") -> Ref | None:
    """The library a build's manifest names (its ``library`` section); None when it names none."""
    if manifest.get("library") is None:
        return None
    try:
        return parse_ref({k: v for k, v in _mapping(manifest["library"]).items() if k in ("name", "digest")},
                         f"{where}: library")
    except RefError as exc:
        raise LibraryError(str(exc)) from None


def _mapping(value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise RefError(f"an object with name and digest, got {type(value).__name__}")
    return value


def ref_of_rows(paths: Sequence[Path]) -> Ref | None:
    """The library the rows of ``paths`` (parquet files) name, read from each file's first row (None:
    the study's; a file of no opgen rows names none). Files naming different libraries are a
    :class:`LibraryMismatch` naming them."""
    named: dict[str, tuple[Path, Ref | None]] = {}
    for path in paths:
        ref = _first_row_ref(Path(path))
        named.setdefault(ref.digest if ref is not None else STUDY.digest, (Path(path), ref))
    if len(named) > 1:
        shown = "; ".join(f"{p} ({r if r is not None else 'the study' + chr(39) + 's'})" for p, r in named.values())
        raise LibraryMismatch(f"the rows name different operator libraries: {shown}; give files of one library")
    return next(iter(named.values()))[1] if named else None


def _first_row_ref(path: Path) -> Ref | None:
    """The library a file's first row names: None for no library, no opgen row, or not parquet (the
    caller's own reading names that); a first row too deep to read or with a malformed ``library``
    member is a :class:`opgen.truth.GroundTruthError` naming the file."""
    # pyarrow is imported here, not at the top: the reward's entry points use this module and never
    # read parquet, and pyarrow costs ~0.1 s of their start-up.
    import pyarrow.parquet as pq

    where = f"{path}: row 0: ground_truth"
    try:
        with pq.ParquetFile(path) as pf:
            if pf.schema_arrow.get_field_index("reward_model") < 0:
                return None
            batch = next(pf.iter_batches(batch_size=1, columns=["reward_model"]), None)
    except (OSError, ValueError):
        return None
    rms = batch.column(0).to_pylist() if batch is not None else []
    raw = rms[0].get("ground_truth") if rms and isinstance(rms[0], dict) else None
    if isinstance(raw, str) and truth.text_too_deep(raw):
        raise truth.GroundTruthError(f"{where} nests deeper than {truth.MAX_DEPTH} levels")
    try:
        gt = truth.read(raw, where)
    except truth.GroundTruthError:
        return None  # not an opgen ground truth (another project's row): it names no library
    return ref_of_truth(gt, where)
